/**
 * `toolgate call` as a user runs it on a terminal: the real bin under a pseudo-terminal
 * (util-linux `script`), against a real gateway and worker with the docker sandbox.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, connect, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Type, defineTool } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, TOOLGATE_BIN } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

// `script` (util-linux, in every Debian base install) gives the command a real pty without a
// native module to compile; Ctrl-C is the byte 0x03 written to it, turned into SIGINT by the
// terminal driver exactly as when a person presses it.
const noScript = (() => {
  try {
    execFileSync('script', ['--version'], { stdio: 'ignore' });
    return undefined;
  } catch {
    return 'util-linux `script` is not installed';
  }
})();
const reason = noScript ?? (await whyDriverUnavailable('docker'));
if (reason) console.warn(`cli-call: skipped, ${reason}`);

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

interface Terminal {
  child: ChildProcess;
  /** Everything the terminal showed so far (stdout and stderr, as a pty merges them). */
  screen(): string;
  waitFor(pattern: RegExp, ms?: number): Promise<string>;
  ctrlC(): void;
  exited: Promise<number>;
}

/** `toolgate <args>` on a pseudo-terminal. */
function onTerminal(args: string[], env: Record<string, string>): Terminal {
  const command = `exec ${quote(process.execPath)} ${[TOOLGATE_BIN, ...args].map(quote).join(' ')}`;
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', TERM: 'xterm', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let text = '';
  const waiters = new Set<() => void>();
  const onData = (d: Buffer) => {
    text += d.toString('utf8');
    for (const w of waiters) w();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exited = new Promise<number>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1))),
  );
  return {
    child,
    screen: () => text,
    ctrlC: () => child.stdin!.write('\x03'),
    exited,
    waitFor(pattern, ms = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = pattern.exec(text);
          if (!m) return;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(m[1] ?? m[0]);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no ${pattern} within ${ms} ms; the terminal showed:\n${text}`));
        }, ms);
        waiters.add(check);
        check();
      });
    },
  };
}

/** `toolgate <args>` with pipes (not a terminal), to completion. */
function piped(args: string[], env: Record<string, string>) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [TOOLGATE_BIN, ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH ?? '', ...env }, timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? 1) : 0;
        resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
      },
    );
  });
}

/** Host processes whose command line contains `marker` (a sandbox's processes are host processes). */
function processesWith(marker: string): number {
  let found = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').includes(marker))
        found++;
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

function containersOf(owner: string): number {
  const out = execFileSync('docker', ['ps', '-aq', '--filter', `label=toolgate.owner=${owner}`], {
    encoding: 'utf8',
  });
  return out.split('\n').filter(Boolean).length;
}

async function until<T>(what: () => Promise<T> | T, ok: (v: T) => boolean, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await what();
    if (ok(value) || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A command whose sandbox process is `sleep 60.<n>` (unique to one test, visible on the host),
 * while the command line of `toolgate call` itself carries `$s`, so it never matches.
 */
const sleeper = () => {
  const secs = `60.${Math.floor(Math.random() * 1e6)}`;
  return { marker: `sleep ${secs}`, args: JSON.stringify({ command: `s=${secs}; sleep $s` }) };
};
// The id the command names when it cancels or leaves a call.
const CALL_ID = /call (\S+?)[… ]/;

/** Reports progress 1/3, 2/3, 3/3 with a pause after each, and prints a line at the end. */
const slowSteps = defineTool({
  name: 'slow_steps',
  description: 'Three steps with progress',
  category: 'test',
  parameters: Type.Object({ ms: Type.Integer({ maximum: 5000 }) }),
  handler: async ({ ms }, ctx) => {
    for (let i = 1; i <= 3; i++) {
      ctx.events?.progress(i, 3, `step ${i}`);
      await sleep(ms, undefined, { signal: ctx.signal });
    }
    ctx.events?.output('stdout', 'all steps done\n');
    await sleep(ms, undefined, { signal: ctx.signal });
    return 'done';
  },
});

/**
 * A TCP proxy to the gateway that cuts the first event stream right after it has relayed
 * `cutAfter`, and records each event request's head (to see the Last-Event-ID of the next).
 */
async function cuttingProxy(target: string, cutAfter: string) {
  const { hostname, port } = new URL(target);
  const heads: string[] = [];
  let cut = false;
  const server: Server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    let events = false;
    // Sockets are kept alive and reused: every request head on it counts, not only the first.
    client.on('data', (data: Buffer) => {
      const head = data.toString('latin1');
      if (!/^[A-Z]+ \//.test(head)) return;
      events = /^GET \/v1\/calls\/[^ ]+\/events /.test(head);
      if (events) heads.push(head);
    });
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      client.write(chunk);
      if (events && !cut && chunk.toString('utf8').includes(cutAfter)) {
        cut = true;
        client.destroy();
        upstream.destroy();
      }
    });
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}`,
    heads,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe.skipIf(reason !== undefined)('toolgate call on a terminal (docker sandbox)', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  const owner = `cli-call-${randomUUID().slice(0, 8)}`;
  const env = () => ({ TOOLGATE_URL: stack.url, TOOLGATE_KEY: KEYS.alice });
  const status = async (id: string) =>
    ((await (await stack.call(`/v1/calls/${id}`)).json()) as { status: string }).status;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'toolgate-cli-call-'));
    // No warm pool: every container here is a call's, so one left after a cancel is a leak.
    sandbox = await createSandbox(testSandboxConfig('docker', dir, { pool: { size: 0 } }), {
      ownerId: owner,
    });
    await sandbox.start();
    stack = await startStack({
      tools: [...testTools, slowSteps],
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
      config: {
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 10_000 } },
          { id: 'bob', key: KEYS.bob, tools: ['category:math'] },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
        ],
      },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('streams the output as it comes: "step 1" shows before the call ends', async () => {
    const term = onTerminal(
      ['call', 'run_shell', '{"command":"for i in 1 2 3; do echo step $i; sleep 1; done"}'],
      env(),
    );
    await term.waitFor(/step 1/);
    // The call is still running when its first line is on the screen.
    expect(term.screen()).not.toContain('step 3');
    expect(term.screen()).not.toMatch(/✓ run_shell ok/);
    expect(term.child.exitCode).toBeNull();
    expect(await term.exited).toBe(0);
    const screen = term.screen();
    expect(screen).toMatch(/step 1\r?\nstep 2\r?\nstep 3/);
    // Printed once: the result does not repeat what was streamed.
    expect(screen.match(/step 2/g)).toHaveLength(1);
    expect(screen).toMatch(/✓ run_shell ok in [\d.]+ s, exit code 0/);
  }, 60_000);

  it('shows progress as one line redrawn in place on the terminal, erased before the result', async () => {
    const term = onTerminal(['call', 'slow_steps', '{"ms":400}'], env());
    await term.waitFor(/\[1\/3 33%\] step 1/);
    await term.waitFor(/\[3\/3 100%\] step 3/);
    expect(await term.exited).toBe(0);
    const screen = term.screen();
    // Each step replaces the line before it (carriage return + erase line), no new lines.
    const erase = '\r\x1b[K';
    expect(screen).toContain(`[1/3 33%] step 1${erase}[2/3 67%] step 2${erase}[3/3 100%] step 3`);
    // Output erases the line first; the result follows.
    expect(screen).toContain(`step 3${erase}all steps done`);
    expect(screen).toContain(`${erase}done\r\n`);
    expect(screen).toMatch(/✓ slow_steps ok/);
  }, 60_000);

  it('resumes a dropped event stream with Last-Event-ID: every line once', async () => {
    const proxy = await cuttingProxy(stack.url, 'step 1');
    try {
      const term = onTerminal(
        ['call', 'run_shell', '{"command":"for i in 1 2 3; do echo step $i; sleep 1; done"}'],
        { ...env(), TOOLGATE_URL: proxy.url },
      );
      expect(await term.exited).toBe(0);
      const screen = term.screen();
      // Every line once and in order, a note on stderr where the stream was reopened.
      expect(screen.match(/step \d/g)).toEqual(['step 1', 'step 2', 'step 3']);
      expect(screen).toMatch(/step 1\r?\n[^\n]*reconnecting[^\n]*\r?\nstep 2/);
      // Two event requests: the second resumes after the last event the first delivered.
      expect(proxy.heads).toHaveLength(2);
      expect(proxy.heads[0]).not.toMatch(/last-event-id/i);
      expect(proxy.heads[1]).toMatch(/last-event-id: \d+/i);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('one Ctrl-C cancels: the server says cancelled, exit 4, the sandbox is gone', async () => {
    const { marker, args } = sleeper();
    const term = onTerminal(['call', 'run_shell', args], env());
    await until(
      () => processesWith(marker),
      (n) => n > 0,
      30_000,
    );
    expect(processesWith(marker)).toBeGreaterThan(0);
    const pressed = performance.now();
    term.ctrlC();
    const id = await term.waitFor(CALL_ID);
    expect(await term.exited).toBe(4);
    const exitedMs = performance.now() - pressed;
    expect(term.screen()).toMatch(
      /✗ run_shell cancelled.*cancelled: The call was cancelled by alice/,
    );
    expect(await status(id)).toBe('cancelled');
    expect(
      await until(
        () => processesWith(marker),
        (n) => n === 0,
        5000,
      ),
    ).toBe(0);
    expect(
      await until(
        () => containersOf(owner),
        (n) => n === 0,
        5000,
      ),
    ).toBe(0);
    console.warn(
      `Ctrl-C → exit 4: ${exitedMs.toFixed(0)} ms (1 s of it the grace for a second Ctrl-C); → no process and no container: ${(performance.now() - pressed).toFixed(0)} ms`,
    );
  }, 60_000);

  it('two Ctrl-C leave the call running and print its id (exit 130)', async () => {
    const { marker, args } = sleeper();
    const term = onTerminal(['call', 'run_shell', args], env());
    await until(
      () => processesWith(marker),
      (n) => n > 0,
      30_000,
    );
    term.ctrlC();
    const id = await term.waitFor(CALL_ID);
    term.ctrlC();
    expect(await term.exited).toBe(130);
    expect(term.screen()).toContain(`left call ${id} running`);
    expect(term.screen()).toMatch(new RegExp(`^${id}\\r?$`, 'm'));
    // Still running well past the moment a cancel would have landed.
    await new Promise((r) => setTimeout(r, 2000));
    expect(await status(id)).toBe('running');
    expect(processesWith(marker)).toBeGreaterThan(0);
    const cancelled = await stack.call(`/v1/calls/${id}/cancel`, { method: 'POST' });
    expect(cancelled.status).toBe(200);
  }, 60_000);

  it('--detach prints the id at once; the call runs on', async () => {
    const term = onTerminal(['call', 'run_shell', sleeper().args, '--detach'], env());
    expect(await term.exited).toBe(0);
    const id = /^([\w-]+)\r?$/m.exec(term.screen())?.[1];
    expect(id).toBeTruthy();
    expect(
      await until(
        () => status(id!),
        (s) => s === 'running',
        30_000,
      ),
    ).toBe('running');
    expect((await stack.call(`/v1/calls/${id}/cancel`, { method: 'POST' })).status).toBe(200);
  }, 60_000);

  it('a call parked for approval says so and waits; a rejection exits 3', async () => {
    const term = onTerminal(['call', 'wipe_disk', '{"disk":"sda"}'], env());
    const id = await term.waitFor(/call (\S+) waits for an admin's approval/);
    expect(term.child.exitCode).toBeNull();
    const rejected = await stack.call(`/v1/approvals/${id}/reject`, {
      key: KEYS.admin,
      json: { reason: 'not today' },
    });
    expect(rejected.status).toBe(200);
    expect(await term.exited).toBe(3);
    expect(term.screen()).toMatch(/✗ wipe_disk error.*rejected: An administrator \(ops\) rejected/);

    // Not a terminal: the 202 is followed quietly to the outcome, printed as one JSON object.
    const piping = piped(['call', 'wipe_disk', '{"disk":"sdb"}'], env());
    const parked = await until(
      async () =>
        (await (await stack.call('/v1/approvals', { key: KEYS.admin })).json()) as {
          id: string;
          arguments: unknown;
        }[],
      (list) => list.length > 0,
    );
    expect(parked).toHaveLength(1);
    const approved = await stack.call(`/v1/approvals/${parked[0]!.id}/approve`, {
      key: KEYS.admin,
      json: {},
    });
    expect(approved.status).toBe(200);
    const run = await piping;
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      tool: 'wipe_disk',
      status: 'ok',
      result: 'wiped sdb',
    });
    expect(run.stderr).toContain("waits for an admin's approval");
  }, 60_000);

  it('--json on a terminal, and a pipe: one JSON outcome; exit codes for a tool error and a refusal', async () => {
    const term = onTerminal(['call', 'calculator', '{"expression":"6*7"}', '--json'], env());
    expect(await term.exited).toBe(0);
    expect(JSON.parse(term.screen())).toMatchObject({
      tool: 'calculator',
      status: 'ok',
      result: 42,
    });

    const ok = await piped(['call', 'run_shell', '{"command":"echo hi"}'], env());
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ status: 'ok', result: { stdout: 'hi\n' } });

    // A tool error: exit 1, its code printed.
    const failed = onTerminal(['call', 'calculator', '{"expression":"2+"}'], env());
    expect(await failed.exited).toBe(1);
    expect(failed.screen()).toMatch(/✗ calculator error.*: \w+/);
    const failedJson = await piped(['call', 'calculator', '{"expression":"2+"}'], env());
    expect(failedJson.code).toBe(1);
    expect(JSON.parse(failedJson.stdout)).toMatchObject({ status: 'error' });

    // Refused: bob may call math tools only.
    const refused = onTerminal(['call', 'run_shell', '{"command":"true"}'], {
      ...env(),
      TOOLGATE_KEY: KEYS.bob,
    });
    expect(await refused.exited).toBe(3);
    expect(refused.screen()).toMatch(/403 forbidden/);
    const refusedJson = await piped(['call', 'run_shell', '{"command":"true"}'], {
      ...env(),
      TOOLGATE_KEY: KEYS.bob,
    });
    expect(refusedJson.code).toBe(3);

    // The tool's schema refuses the arguments: bad usage.
    const bad = await piped(['call', 'calculator', '{"nope":1}'], env());
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/400 invalid_arguments/);
  }, 60_000);
});
