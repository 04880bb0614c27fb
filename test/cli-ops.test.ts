/**
 * `toolgate upstreams|sessions|audit|stats|completion` as an operator runs them, in process
 * (runCli) against a real gateway and worker, a real MCP upstream and
 * the Docker sandbox (sessions).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMANDS, runCli } from '@toolgate/cli';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { startTestUpstream, type TestUpstream } from './support/test-upstream.js';

interface Run {
  code: number | undefined;
  stdout: string;
  stderr: string;
}

const CAROL = 'carol-key-0123456789abcdef';

const sandboxReason = await whyDriverUnavailable('docker');
if (sandboxReason) console.warn(`cli-ops sessions: skipped, ${sandboxReason}`);

async function until<T>(what: () => Promise<T>, ok: (v: T) => boolean, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await what();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('toolgate upstreams, sessions, audit, stats and completion', () => {
  let stack: Stack;
  let upstream: TestUpstream;
  let sandbox: Sandbox | undefined;
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'tg-cli-ops-'));
    upstream = await startTestUpstream();
    sandbox = sandboxReason
      ? undefined
      : await createSandbox(
          testSandboxConfig('docker', path.join(dir, 'sandbox'), { pool: { size: 0 } }),
        );
    stack = await startStack({
      ...(sandbox ? { services: { sandbox, workspaces: createWorkspaces(sandbox.config) } } : {}),
      config: {
        policy: { http: { allowHosts: ['127.0.0.1'] } },
        upstreams: [{ id: 'pinned', url: upstream.url }],
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['*'] },
          { id: 'bob', key: KEYS.bob, tools: ['current_time', 'category:math'] },
          { id: 'carol', key: CAROL, tools: ['*'] },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
        ],
      },
    });
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    await upstream?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** `toolgate <args…>` in process, with a key (default the admin's) and no terminal. */
  async function toolgate(
    args: string[],
    o: { key?: string | null; signal?: AbortSignal; out?: (t: string) => void } = {},
  ): Promise<Run> {
    const out: string[] = [];
    const err: string[] = [];
    const key = o.key === undefined ? KEYS.admin : o.key;
    const code = await runCli(args, {
      cwd: dir,
      env: {
        TOOLGATE_GATEWAY: stack.url,
        XDG_CONFIG_HOME: path.join(dir, 'config'),
        ...(key ? { TOOLGATE_KEY: key } : {}),
      },
      out: (t) => {
        out.push(t);
        o.out?.(t);
      },
      err: (t) => err.push(t),
      isTTY: false,
      ...(o.signal ? { signal: o.signal } : {}),
    });
    return { code, stdout: out.join(''), stderr: err.join('') };
  }
  const json = <T>(run: Run): T => JSON.parse(run.stdout) as T;

  describe('completion', () => {
    it('prints scripts for bash (valid syntax, completes commands), zsh and fish', async () => {
      const firstWords = [...new Set(COMMANDS.map((c) => c.name.split(' ')[0]!))];
      expect(firstWords).toEqual(expect.arrayContaining(['upstreams', 'audit', 'completion']));
      const bash = await toolgate(['completion', 'bash']);
      expect(bash.code).toBe(0);
      const file = path.join(dir, 'toolgate.bash');
      writeFileSync(file, bash.stdout);
      execFileSync('bash', ['-n', file]);
      // The first word comes from the script itself, no toolgate process.
      const words = execFileSync(
        'bash',
        [
          '-c',
          `source "$1"; COMP_WORDS=(toolgate up); COMP_CWORD=1; _toolgate; printf '%s\\n' "\${COMPREPLY[@]}"`,
          'x',
          file,
        ],
        { encoding: 'utf8' },
      );
      expect(words.split('\n').filter(Boolean).sort()).toEqual(['up', 'upstreams']);
      for (const shell of ['zsh', 'fish']) {
        const run = await toolgate(['completion', shell]);
        expect(run.code).toBe(0);
        expect(run.stdout).toContain('toolgate __complete');
        for (const w of firstWords) expect(run.stdout, `${shell}: ${w}`).toContain(`'${w}`);
      }
      expect((await toolgate(['completion', 'tcsh'])).code).toBe(2);
    });

    it('__complete: subcommands, flags, -o values and the gateway tools for call', async () => {
      const lines = async (words: string[], key?: string | null) =>
        (await toolgate(['__complete', ...words], { key })).stdout
          .split('\n')
          .filter(Boolean)
          .map((l) => l.split('\t')[0]);
      expect(await lines(['upstreams', ''])).toEqual(['approve']);
      expect(await lines(['sessions', 'e'])).toEqual(['end']);
      expect(await lines(['audit', '--f'])).toEqual(['--follow']);
      expect(await lines(['stats', '-o', ''])).toEqual(['table', 'json', 'yaml']);
      // the tools this key may call, from GET /tools
      const bobs = await lines(['call', ''], KEYS.bob);
      expect(bobs).toContain('calculator');
      expect(bobs).not.toContain('run_shell'); // not in bob's scope
      expect(await lines(['call', 'calc'], KEYS.alice)).toEqual(['calculator']);
      // no key: no request, nothing offered, nothing on stderr
      const none = await toolgate(['__complete', 'call', ''], { key: null });
      expect(none).toEqual({ code: 0, stdout: '', stderr: '' });
    });
  });

  describe('upstreams', () => {
    it('lists the pinned tools with the diff of each pending one; approve --yes serves it', async () => {
      const listed = await until(
        () => toolgate(['upstreams', '-o', 'table']),
        (r) => r.stdout.includes('pinned__echo'),
      );
      expect(listed.code).toBe(0);
      expect(listed.stdout).toMatch(/^UPSTREAM\s+STATE\s+TRUST\s+TOOL\s+NAME\s+STATUS/m);
      expect(listed.stdout).toMatch(/^pinned\s+up\s+pin\s+echo\s+pinned__echo\s+pending/m);
      expect(listed.stdout).toContain('pinned/echo (pinned__echo): never approved (pending)');
      expect(listed.stdout).toContain('+  "description": "Says the text back"');

      const asJson = json<
        { id: string; tools: { tool: string; status: string; diff?: string[] }[] }[]
      >(await toolgate(['upstreams', '-o', 'json']));
      const echo = asJson[0]!.tools.find((t) => t.tool === 'echo')!;
      expect(echo.status).toBe('pending');
      expect(echo.diff).toContain('+  "description": "Says the text back",');

      // a non-admin key is refused in one line
      const alice = await toolgate(['upstreams'], { key: KEYS.alice });
      expect(alice.code).toBe(1);
      expect(alice.stderr).toMatch(/^toolgate: 403 forbidden/);

      // no terminal to ask on and no --yes: refused, nothing approved
      const refused = await toolgate(['upstreams', 'approve', 'pinned', 'echo']);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain('give --yes to approve');
      expect(refused.stderr).toContain('+  "description": "Says the text back"');
      expect(
        (await stack.call('/tools/pinned__echo/execute', { json: { text: 'x' } })).status,
      ).toBe(403);

      const approved = await toolgate([
        'upstreams',
        'approve',
        'pinned',
        'pinned__echo',
        '--yes',
        '-o',
        'json',
      ]);
      expect(approved.code).toBe(0);
      expect(json(approved)).toMatchObject({
        upstream: 'pinned',
        tool: 'echo',
        status: 'approved',
        approvedBy: 'ops',
      });
      const call = await stack.call('/tools/pinned__echo/execute', { json: { text: 'hi' } });
      expect(call.status).toBe(200);
      expect(await call.json()).toMatchObject({ status: 'ok' });

      const again = await toolgate(['upstreams', 'approve', 'pinned', 'echo', '--yes']);
      expect(again.code).toBe(0);
      expect(again.stderr).toContain('already approved');
      const unknown = await toolgate(['upstreams', 'approve', 'pinned', 'nope', '--yes']);
      expect(unknown).toMatchObject({
        code: 1,
        stderr: 'toolgate: upstream "pinned" has no tool "nope"\n',
      });

      // a changed definition made of an invisible character: quarantined, and the diff shows it
      upstream.setDescription('echo', 'Says the text back\u200B');
      const quarantined = await until(
        () => toolgate(['upstreams', '-o', 'table']),
        (r) => /^pinned\s+up\s+pin\s+echo\s+pinned__echo\s+quarantined/m.test(r.stdout),
      );
      expect(quarantined.stdout).toContain('changed since it was approved (quarantined)');
      expect(quarantined.stdout).toContain('-  "description": "Says the text back",');
      expect(quarantined.stdout).toContain('+  "description": "Says the text back⟨U+200B⟩",');
    });
  });

  describe('audit and stats', () => {
    it("show a call's entry and the called tool; -o json and yaml parse; bad filters exit 2", async () => {
      const res = await stack.call('/tools/calculator/execute', { json: { expression: '6*7' } });
      const { id } = (await res.json()) as { id: string };
      const audit = await until(
        () => toolgate(['audit', '--event', 'call', '--client', 'alice', '-o', 'json']),
        (r) => r.stdout.includes(id),
      );
      expect(audit.code).toBe(0);
      expect(json<{ callId?: string }[]>(audit).find((e) => e.callId === id)).toMatchObject({
        event: 'call',
        client: 'alice',
        tool: 'calculator',
        status: 'ok',
      });
      const table = await toolgate(['audit', '--call', id, '-o', 'table']);
      expect(table.stdout).toMatch(new RegExp(`call\\s+alice\\s+calculator\\s+ok\\s+.*${id}`));
      expect((await toolgate(['audit', '--event', 'bogus'])).code).toBe(2);
      expect((await toolgate(['audit', '--limit', '0'])).code).toBe(2);
      expect((await toolgate(['audit'], { key: KEYS.alice })).code).toBe(1);

      const stats = await until(
        () => toolgate(['stats', '-o', 'yaml'], { key: KEYS.alice }),
        (r) => r.stdout.includes('calculator'),
      );
      expect(stats.code).toBe(0);
      const report = parseYaml(stats.stdout) as {
        tools: { tool: string; calls: number; ok: number }[];
      };
      expect(report.tools.find((t) => t.tool === 'calculator')).toMatchObject({ calls: 1, ok: 1 });
      const statsTable = await toolgate(['stats', '-o', 'table'], { key: KEYS.alice });
      expect(statsTable.stdout).toMatch(/^TOOL\s+CALLS\s+OK\s+ERRORS/m);
      expect(statsTable.stdout).toMatch(/^calculator\s+1\s+1\s+0\s/m);
      expect(statsTable.stdout).toMatch(/^cache: \d+ hits, \d+ misses, hit rate/m);
      expect((await toolgate(['stats', '-o', 'xml'])).code).toBe(2);
    });

    it('audit --follow prints a call made after it started, once, and stops on abort', async () => {
      const stop = new AbortController();
      let printed = '';
      const following = toolgate(['audit', '--follow', '--client', 'bob', '-o', 'json'], {
        signal: stop.signal,
        out: (t) => (printed += t),
      });
      await new Promise((r) => setTimeout(r, 300)); // its first poll (of nothing of bob's yet)
      const ids: string[] = [];
      for (const expression of ['1+1', '2+2']) {
        const res = await stack.call('/tools/calculator/execute', {
          key: KEYS.bob,
          json: { expression },
        });
        ids.push(((await res.json()) as { id: string }).id);
        await until(
          () => Promise.resolve(printed),
          (p) => p.includes(ids.at(-1)!),
        );
      }
      // a few more polls with nothing new: nothing printed twice
      await new Promise((r) => setTimeout(r, 2500));
      stop.abort();
      const run = await following;
      expect(run.code).toBe(130);
      const lines = run.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { callId: string });
      expect(lines.map((e) => e.callId)).toEqual(ids);
    });
  });

  describe.skipIf(sandboxReason !== undefined)('sessions', () => {
    it('lists own and (admins) every session; end and end --admin stop them', async () => {
      const open = async (key: string) => {
        const res = await stack.call('/v1/sessions', { key, json: { tool: 'run_shell' } });
        expect(res.status).toBe(201);
        return ((await res.json()) as { id: string }).id;
      };
      const mine = await open(KEYS.alice);
      const carols = await open(CAROL);

      const own = await toolgate(['sessions', '-o', 'json'], { key: KEYS.alice });
      expect(own.code).toBe(0);
      expect(json<{ id: string }[]>(own).map((s) => s.id)).toEqual([mine]);
      const table = await toolgate(['sessions', '-o', 'table'], { key: KEYS.alice });
      expect(table.stdout).toMatch(new RegExp(`^${mine}\\s+run_shell\\s+\\d+s ago`, 'm'));
      const all = json<{ id: string; clientId: string }[]>(
        await toolgate(['sessions', '--all', '-o', 'json']),
      );
      expect(all).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ id: mine, clientId: 'alice' }),
          expect.objectContaining({ id: carols, clientId: 'carol' }),
        ]),
      );
      expect((await toolgate(['sessions', '--all'], { key: KEYS.alice })).code).toBe(1);

      const ended = await toolgate(['sessions', 'end', mine, '-o', 'table'], { key: KEYS.alice });
      expect(ended).toMatchObject({ code: 0, stdout: `session ${mine} ended\n` });
      const gone = await toolgate(['sessions', 'end', mine], { key: KEYS.alice });
      expect(gone.code).toBe(1);
      expect(gone.stderr).toContain('session_not_found');
      // another client's session: unknown to alice, ended by an admin with --admin (audited)
      expect((await toolgate(['sessions', 'end', carols], { key: KEYS.alice })).code).toBe(1);
      expect((await toolgate(['sessions', 'end', carols, '--admin'])).code).toBe(0);
      expect(json<unknown[]>(await toolgate(['sessions', '--all', '-o', 'json']))).toEqual([]);
      const audit = json<{ event: string; by?: string }[]>(
        await toolgate(['audit', '--event', 'session', '--client', 'carol', '-o', 'json']),
      );
      expect(audit[0]).toMatchObject({ event: 'session', by: 'ops' });
    });
  });
});
