/**
 * `toolgate login|logout`, `calls` (list, --follow, show, logs, cancel), `approvals`, `approve`,
 * `deny` against a real gateway and worker: in process through runCli (fast), the bin once for
 * Ctrl-C.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { runCli } from '@toolgate/cli';
import { ROOT, TOOLGATE_BIN } from './support/process.js';
import { freePort } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools, ticker } from './support/tools.js';

interface Run {
  code: number | undefined;
  stdout: string;
  stderr: string;
}

let stack: Stack;
let home: string;

beforeAll(async () => {
  home = mkdtempSync(path.join(tmpdir(), 'tg-cli-calls-'));
  stack = await startStack({
    tools: [...testTools, ticker],
    config: { policy: { approval: { tools: ['calculator'] } } },
  });
});
afterAll(async () => {
  await stack?.close();
  rmSync(home, { recursive: true, force: true });
});

interface RunOptions {
  env?: Record<string, string>;
  key?: string | null;
  isTTY?: boolean;
  stdin?: string;
  signal?: AbortSignal;
  /** Sees output as it comes (for commands that follow). */
  live?: { out: string[]; err: string[] };
}

/** `toolgate <args>` in process, against the stack, a config home of its own, no colours unless asked. */
async function toolgate(args: string[], o: RunOptions = {}): Promise<Run> {
  const out = o.live?.out ?? [];
  const err = o.live?.err ?? [];
  const key = o.key === undefined ? KEYS.alice : o.key;
  const code = await runCli(args, {
    cwd: home,
    env: {
      HOME: home,
      XDG_CONFIG_HOME: path.join(home, 'config'),
      TOOLGATE_GATEWAY: stack.url,
      ...(key ? { TOOLGATE_KEY: key } : {}),
      ...o.env,
    },
    out: (t) => out.push(t),
    err: (t) => err.push(t),
    isTTY: o.isTTY ?? false,
    ...(o.stdin === undefined ? {} : { readStdin: async () => o.stdin! }),
    ...(o.signal ? { signal: o.signal } : {}),
  });
  return { code, stdout: out.join(''), stderr: err.join('') };
}

async function until<T>(what: string, fn: () => T | undefined | false, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function accepted(tool: string, args: unknown, key: string = KEYS.alice): Promise<string> {
  const res = await stack.call(`/tools/${tool}/execute?wait=false`, { json: args, key });
  expect([200, 202]).toContain(res.status);
  return ((await res.json()) as { id: string }).id;
}

describe('toolgate calls', () => {
  it('lists calls as a table, JSON and YAML; shows one; a wrong id is one line and exit 1', async () => {
    const res = await stack.call('/tools/lookup/execute', { json: { q: 'cli-list' } });
    const { id } = (await res.json()) as { id: string };

    const json = await toolgate(['calls', '-o', 'json', '--tool', 'lookup']);
    expect(json.code).toBe(0);
    const rows = JSON.parse(json.stdout) as { id: string; status: string }[];
    expect(rows).toContainEqual(expect.objectContaining({ id, status: 'ok' }));

    const yaml = await toolgate(['calls', '-o', 'yaml', '--status', 'ok', '--since', '10m']);
    expect(parseYaml(yaml.stdout)).toContainEqual(expect.objectContaining({ id, tool: 'lookup' }));

    const table = await toolgate(['calls', '-o', 'table', '--limit', '5']);
    expect(table.stdout).toMatch(/^ID +TOOL +CLIENT +STATUS +DURATION +CREATED\n/);
    expect(table.stdout).toMatch(new RegExp(`^${id} +lookup +alice +ok `, 'm'));

    const show = await toolgate(['calls', 'show', id, '-o', 'json']);
    expect(show.code).toBe(0);
    expect(JSON.parse(show.stdout)).toMatchObject({
      id,
      status: 'ok',
      result: { q: 'cli-list' },
    });
    const shown = await toolgate(['calls', 'show', id, '-o', 'table']);
    expect(shown.stdout).toMatch(/^STATUS +ok$/m);
    expect(shown.stdout).toMatch(/^RESULT +\{"q":"cli-list"/m);

    // Another client's call does not exist for bob.
    const missing = await toolgate(['calls', 'show', id], { key: KEYS.bob });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^toolgate: 404 not_found: .*\n$/);

    const bad = await toolgate(['calls', '-o', 'xml']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('-o/--output must be table, json or yaml');
    expect((await toolgate(['calls', '--since', 'yesterday'])).code).toBe(2);
  });

  it('logs -f prints the live output as it comes, then the outcome; logs after the end prints the result', async () => {
    const id = await accepted('ticker', { n: 4, ms: 250 });
    const live = { out: [] as string[], err: [] as string[] };
    const run = toolgate(['calls', 'logs', id, '-f'], { live });
    // Live: the first tick is printed while the call still runs.
    await until('tick 1', () => live.out.join('').includes('tick 1\n'));
    const during = await toolgate(['calls', 'show', id, '-o', 'json']);
    expect(JSON.parse(during.stdout).status).toBe('running');
    const done = await run;
    expect(done.code).toBe(0);
    expect(done.stdout).toBe('tick 1\ntick 2\ntick 3\ntick 4\n');
    expect(done.stderr).toMatch(/^ok in /m);

    const after = await toolgate(['calls', 'logs', id]);
    expect(after.code).toBe(0);
    expect(JSON.parse(after.stdout)).toEqual({ ticks: 4 });

    const events = await toolgate(['calls', 'logs', id, '-o', 'json']);
    const kinds = events.stdout
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { event: string }).event);
    expect(kinds).toEqual(['status', 'outcome']);
  });

  it('logs without -f on a call in flight prints the output so far and returns', async () => {
    const id = await accepted('ticker', { n: 40, ms: 100 });
    const live = { out: [] as string[], err: [] as string[] };
    const follow = new AbortController();
    const watching = toolgate(['calls', 'logs', id, '-f'], { live, signal: follow.signal });
    await until('tick 3', () => live.out.join('').includes('tick 3\n'));
    follow.abort();
    expect((await watching).code).toBe(130);
    const sofar = await toolgate(['calls', 'logs', id]);
    expect(sofar.code).toBe(0);
    expect(sofar.stdout).toMatch(/^tick 1\ntick 2\ntick 3\n/);
    expect(sofar.stdout).not.toContain('tick 40');
    const still = await toolgate(['calls', 'show', id, '-o', 'json']);
    expect(JSON.parse(still.stdout).status).toBe('running');
    await toolgate(['calls', 'cancel', id]);
  });

  it('cancel stops a running call (cancelled); cancelling it again is exit 1', async () => {
    const id = await accepted('ticker', { n: 200, ms: 100 });
    const run = await toolgate(['calls', 'cancel', id, '-o', 'table']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`^call ${id} \\(ticker\\) (cancelled|: cancel asked)`));
    const shown = await toolgate(['calls', 'show', id, '-o', 'json']);
    expect(JSON.parse(shown.stdout)).toMatchObject({ status: 'cancelled', cancelledBy: 'alice' });
    const again = await toolgate(['calls', 'cancel', id]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^toolgate: 409 conflict: /);
  });

  it('--follow prints a call made after it started, once, and stops on the signal', async () => {
    const stop = new AbortController();
    const live = { out: [] as string[], err: [] as string[] };
    const run = toolgate(['calls', '--follow', '-o', 'table', '--tool', 'lookup'], {
      live,
      signal: stop.signal,
    });
    await until('the header', () => live.out.join('').startsWith('ID '));
    const res = await stack.call('/tools/lookup/execute', { json: { q: 'followed' } });
    const { id } = (await res.json()) as { id: string };
    await until('the new call', () => live.out.join('').includes(id));
    // Three more polls: the call is not printed again.
    await sleep(3200);
    stop.abort();
    const done = await run;
    expect(done.code).toBe(130);
    expect(done.stdout.split('\n').filter((l) => l.startsWith(id))).toHaveLength(1);
    expect(done.stdout.match(/^ID /gm)).toHaveLength(1);
  });

  it('--follow prints a line when a call changes status: in flight, then ok', async () => {
    const stop = new AbortController();
    const live = { out: [] as string[], err: [] as string[] };
    const run = toolgate(['calls', '-f', '-o', 'json', '--tool', 'ticker'], {
      live,
      signal: stop.signal,
    });
    const id = await accepted('ticker', { n: 8, ms: 250 });
    const statuses = () =>
      live.out
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { id: string; status: string })
        .filter((c) => c.id === id)
        .map((c) => c.status);
    await until('the outcome', () => statuses().includes('ok'));
    stop.abort();
    expect((await run).code).toBe(130);
    const seen = statuses();
    expect(['queued', 'running']).toContain(seen[0]);
    expect(seen.at(-1)).toBe('ok');
    expect(new Set(seen).size).toBe(seen.length);
  });
});

describe('toolgate approvals, approve, deny', () => {
  it('lists a parked call, approves one and denies another with a reason; --follow sees both', async () => {
    const stop = new AbortController();
    const live = { out: [] as string[], err: [] as string[] };
    const follow = toolgate(['approvals', '--follow', '-o', 'json'], {
      key: KEYS.admin,
      live,
      signal: stop.signal,
    });
    const lines = () =>
      live.out
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { event: string; id: string; detail: string });

    const first = await accepted('calculator', { expression: '6*7' });
    const second = await accepted('calculator', { expression: '1+1' });
    const listed = await toolgate(['approvals', '-o', 'json'], { key: KEYS.admin });
    expect(listed.code).toBe(0);
    expect((JSON.parse(listed.stdout) as { id: string }[]).map((a) => a.id)).toEqual(
      expect.arrayContaining([first, second]),
    );
    // A client's key is not an admin's.
    const refused = await toolgate(['approvals']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^toolgate: 403 /);

    const approved = await toolgate(['approve', first, '-o', 'table'], { key: KEYS.admin });
    expect(approved).toMatchObject({ code: 0, stdout: `call ${first} approved by ops\n` });
    const denied = await toolgate(['deny', second, '--reason', 'not today', '-o', 'yaml'], {
      key: KEYS.admin,
    });
    expect(denied.code).toBe(0);
    expect(parseYaml(denied.stdout)).toMatchObject({ id: second, decision: 'rejected', by: 'ops' });

    await until('both decisions in the feed', () =>
      lines().some((l) => l.id === second && l.event === 'rejected'),
    );
    stop.abort();
    expect((await follow).code).toBe(130);
    const seen = lines();
    expect(seen.find((l) => l.id === first && l.event === 'approved')).toBeDefined();
    expect(seen.find((l) => l.id === second && l.event === 'rejected')?.detail).toBe(
      'by ops: not today',
    );
    expect(
      seen.filter((l) => l.id === first && ['pending', 'parked'].includes(l.event)),
    ).toHaveLength(1);

    const result = JSON.parse((await toolgate(['calls', 'show', second, '-o', 'json'])).stdout);
    expect(result).toMatchObject({ status: 'rejected', approval: { reason: 'not today' } });
    const again = await toolgate(['approve', second], { key: KEYS.admin });
    expect(again.code).toBe(1);
  });
});

describe('toolgate login, logout, the profile and the output', () => {
  it('login stores the key 0600 after checking it; commands use it; a readable profile is refused; logout removes it', async () => {
    const file = path.join(home, 'config', 'toolgate', 'profile.json');
    const wrong = await toolgate(['login', '--gateway', stack.url], {
      key: null,
      stdin: 'nope\n',
      env: { TOOLGATE_GATEWAY: '' },
    });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^toolgate: 401 /);
    expect(() => statSync(file)).toThrow();

    const login = await toolgate(['login', '--gateway', stack.url, '-o', 'table'], {
      key: null,
      stdin: `${KEYS.admin}\n`,
    });
    expect(login.code).toBe(0);
    expect(login.stdout).toContain(`logged in to ${stack.url} as client ops, an admin`);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(path.dirname(file)).mode & 0o777).toBe(0o700);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ gateway: stack.url, key: KEYS.admin });

    // No flag, no env: the profile's gateway and key (an admin's: approvals answer).
    const noEnv = { TOOLGATE_GATEWAY: '' };
    expect((await toolgate(['approvals', '-o', 'json'], { key: null, env: noEnv })).code).toBe(0);
    // Another gateway is never sent the stored key.
    const elsewhere = await toolgate(['approvals'], {
      key: null,
      env: { TOOLGATE_GATEWAY: stack.url.replace('127.0.0.1', 'localhost') },
    });
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toMatch(/^toolgate: 401 /);

    chmodSync(file, 0o644);
    const open = await toolgate(['approvals'], { key: null, env: noEnv });
    expect(open.code).toBe(1);
    expect(open.stderr).toContain(`${file} is readable by others (mode 0644); ignoring it`);
    chmodSync(file, 0o600);

    const logout = await toolgate(['logout'], { key: null, env: noEnv });
    expect(logout.code).toBe(0);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({ gateway: stack.url });
    expect((await toolgate(['approvals'], { key: null, env: noEnv })).code).toBe(1);
  });

  it('colours on a terminal, none with NO_COLOR', async () => {
    await stack.call('/tools/lookup/execute', { json: { q: 'colour' } });
    const coloured = await toolgate(['calls', '--limit', '3'], { isTTY: true });
    expect(coloured.stdout).toContain('\x1b[');
    const plain = await toolgate(['calls', '--limit', '3'], {
      isTTY: true,
      env: { NO_COLOR: '1' },
    });
    expect(plain.code).toBe(0);
    expect(plain.stdout).toMatch(/^ID +TOOL/);
    expect(plain.stdout).not.toContain('\x1b');
  });

  it('an unreachable gateway is one line on stderr and exit 1', async () => {
    const nobody = `http://127.0.0.1:${await freePort()}`;
    for (const args of [
      ['calls'],
      ['calls', 'logs', '00000000-0000-4000-8000-000000000000', '-f'],
      ['approvals', '--follow'],
    ]) {
      const run = await toolgate(args, { env: { TOOLGATE_GATEWAY: nobody } });
      expect(run.code, args.join(' ')).toBe(1);
      expect(run.stderr).toMatch(
        /^toolgate: cannot reach the gateway at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\); [^\n]*\n$/,
      );
    }
  });

  it('the bin: Ctrl-C stops calls --follow with exit 130', async () => {
    const child = spawn(process.execPath, [TOOLGATE_BIN, 'calls', '--follow', '-o', 'table'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: home,
        XDG_CONFIG_HOME: path.join(home, 'bin-config'),
        TOOLGATE_GATEWAY: stack.url,
        TOOLGATE_KEY: KEYS.alice,
      },
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    const exited = new Promise<number | null>((resolve) =>
      child.on('exit', (code) => resolve(code)),
    );
    await until('the header', () => stdout.startsWith('ID '), 30_000);
    child.kill('SIGINT');
    expect(await exited).toBe(130);
  });
});
