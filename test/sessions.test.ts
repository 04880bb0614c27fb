import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createSandbox, createWorkspaces, type DriverName, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

// Sessions through the whole path (docs/sessions.md): HTTP → gateway → the session's worker's
// own queue → one long-lived sandbox per session, on both drivers.
const client = (id: string, key: string, sessions: number) => ({
  id,
  key,
  tools: ['*'],
  rateLimit: { perMinute: 100_000 },
  limits: { sessions },
});
const CAROL = KEYS.admin;

/** What the tests read of an answer (an outcome, or an API error's body). */
interface Body {
  status: string;
  result: { stdout: string; stderr: string; exitCode: number; timedOut: boolean };
  error: { code: string; message: string };
}
const clients = [
  client('alice', KEYS.alice, 8),
  client('bob', KEYS.bob, 8),
  client('carol', CAROL, 2),
];

for (const driver of ['docker', 'bwrap'] as DriverName[]) {
  const reason = await whyDriverUnavailable(driver);
  if (reason) console.warn(`sessions (${driver}): skipped, ${reason}`);

  describe.skipIf(reason !== undefined)(`sessions (${driver})`, () => {
    let stack: Stack;
    let sandbox: Sandbox;
    let dir: string;
    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), `toolgate-sessions-${driver}-`));
      // bwrap's uid in the sandbox must reach the workspaces below it.
      chmodSync(dir, 0o711);
      sandbox = await createSandbox(
        testSandboxConfig(driver, dir, { limits: { memoryMb: 256, pids: 64 } }),
      );
      stack = await startStack({
        services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
        config: { clients, sessions: { interruptGraceMs: 3000 } },
      });
    }, 120_000);
    afterAll(async () => {
      await stack?.close();
      await sandbox?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const open = async (tool = 'run_python', key: string = KEYS.alice) => {
      const res = await stack.call('/v1/sessions', { json: { tool }, key });
      expect(res.status).toBe(201);
      return ((await res.json()) as { id: string }).id;
    };
    const call = async (
      session: string,
      args: Record<string, unknown>,
      o: { tool?: string; key?: string } = {},
    ) => {
      const res = await stack.call(`/tools/${o.tool ?? 'run_python'}/execute`, {
        json: args,
        key: o.key ?? KEYS.alice,
        headers: { 'x-toolgate-session': session },
      });
      return { status: res.status, body: (await res.json()) as Body };
    };
    const stdout = async (session: string, code: string, key: string = KEYS.alice) => {
      const { body } = await call(session, { code }, { key });
      expect(body, JSON.stringify(body)).toMatchObject({ status: 'ok' });
      return body.result.stdout as string;
    };

    it('keeps globals, imports, cwd, open files and /tmp between calls', async () => {
      const s = await open();
      await stdout(
        s,
        'import json, os\nx = 41\nf = open("/tmp/n.txt", "w+")\nos.makedirs("/tmp/d", exist_ok=True)\nos.chdir("/tmp/d")',
      );
      await stdout(s, 'x += 1\nf.write("kept")\nf.flush()');
      expect(await stdout(s, 'print(x, json.dumps(os.getcwd()), open("/tmp/n.txt").read())')).toBe(
        '42 "/tmp/d" kept\n',
      );
      // A trailing expression is shown, as in a notebook; an exception keeps the state.
      expect(await stdout(s, 'x * 2')).toBe('84\n');
      const { body } = await call(s, { code: 'raise ValueError("no")' });
      expect(body).toMatchObject({ status: 'ok', result: { exitCode: 1 } });
      expect(body.result.stderr).toContain('ValueError: no');
      expect(await stdout(s, 'x')).toBe('42\n');
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('over MCP, _meta["toolgate/session"] names the session', async () => {
      const s = await open();
      const client = new Client({ name: 'toolgate-test', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${KEYS.alice}` } },
        }),
      );
      try {
        const inSession = (code: string) =>
          client.callTool({
            name: 'run_python',
            arguments: { code },
            _meta: { 'toolgate/session': s },
          });
        await inSession('n = 5');
        const result = await inSession('print(n * n)');
        expect(result.isError).toBeFalsy();
        expect(JSON.stringify(result.content)).toContain('25');
      } finally {
        await client.close();
        await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
      }
    });

    it('the bridge runs a message’s run_python calls in X-Toolgate-Session', async () => {
      const s = await open();
      const message = (id: string, code: string) => ({
        role: 'assistant',
        tool_calls: [
          {
            id,
            type: 'function',
            function: { name: 'run_python', arguments: JSON.stringify({ code }) },
          },
        ],
      });
      const send = async (id: string, code: string) =>
        (await (
          await stack.call('/v1/tool-calls', {
            json: message(id, code),
            headers: { 'x-toolgate-session': s },
          })
        ).json()) as { messages: { content: string }[] };
      await send('call_a', 'total = 40');
      const answer = await send('call_b', 'print(total + 2)');
      expect(answer.messages[0]!.content).toContain('42');
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('run_shell keeps cwd and variables; the workspace is the client’s', async () => {
      const s = await open('run_shell');
      const shell = async (command: string) =>
        (await call(s, { command }, { tool: 'run_shell' })).body;
      expect(await shell('mkdir -p /tmp/w && cd /tmp/w && GREETING=héllo')).toMatchObject({
        result: { exitCode: 0 },
      });
      expect(await shell('echo "$GREETING from $(pwd)"; false')).toMatchObject({
        status: 'ok',
        result: { stdout: 'héllo from /tmp/w\n', exitCode: 1 },
      });
      await shell('echo shared > /workspace/from-session.txt');
      const read = await stack.call('/tools/run_python/execute', {
        json: { code: 'print(open("from-session.txt").read(), end="")' },
      });
      expect(await read.json()).toMatchObject({ result: { stdout: 'shared\n' } });
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('ten sessions of two clients in parallel never see each other’s state', async () => {
      const aliceSessions = await Promise.all([1, 2, 3, 4, 5].map(() => open()));
      const bobSessions = await Promise.all(
        [1, 2, 3, 4, 5].map(() => open('run_python', KEYS.bob)),
      );
      const all = [
        ...aliceSessions.map((id) => ({ id, key: KEYS.alice })),
        ...bobSessions.map((id) => ({ id, key: KEYS.bob })),
      ];
      await Promise.all(all.map(({ id, key }) => stdout(id, `secret = "${id}"`, key)));
      const seen = await Promise.all(
        all.map(({ id, key }) =>
          stdout(id, 'print(secret, globals().get("other"))\nother = secret', key),
        ),
      );
      expect(seen).toEqual(all.map(({ id }) => `${id} None\n`));
      // Another client's session: as unknown as a missing one.
      const foreign = await call(aliceSessions[0]!, { code: 'print(secret)' }, { key: KEYS.bob });
      expect(foreign).toMatchObject({
        status: 404,
        body: { error: { code: 'session_not_found' } },
      });
      const del = await stack.call(`/v1/sessions/${aliceSessions[0]}`, {
        method: 'DELETE',
        key: KEYS.bob,
      });
      expect(del.status).toBe(404);
      const listed = (await (await stack.call('/v1/sessions', { key: KEYS.bob })).json()) as {
        sessions: { id: string }[];
      };
      expect(listed.sessions.map((x) => x.id).sort()).toEqual([...bobSessions].sort());
      // Each started session shows its sandbox's memory (its worker reads the cgroup).
      for (const listedSession of listed.sessions as { memoryBytes?: number }[])
        expect(listedSession.memoryBytes).toBeGreaterThan(1024 * 1024);
      for (const { id, key } of all)
        await stack.call(`/v1/sessions/${id}`, { method: 'DELETE', key });
    }, 120_000);

    it('caps sessions per client: beyond limits.sessions, 429 too_many_sessions', async () => {
      const mine = [await open('run_python', CAROL), await open('run_shell', CAROL)];
      const res = await stack.call('/v1/sessions', { json: { tool: 'run_python' }, key: CAROL });
      expect(res.status).toBe(429);
      expect(await res.json()).toMatchObject({
        error: { code: 'too_many_sessions', details: { sessions: 2, limit: 2 } },
      });
      // Deleting one makes room.
      const del = await stack.call(`/v1/sessions/${mine[0]}`, { method: 'DELETE', key: CAROL });
      expect(del.status).toBe(204);
      const again = await open('run_python', CAROL);
      for (const id of [mine[1], again])
        await stack.call(`/v1/sessions/${id}`, { method: 'DELETE', key: CAROL });
    });

    it('bad requests get stable codes', async () => {
      const bad = await stack.call('/v1/sessions', { json: { tool: 'calculator' } });
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({ error: { code: 'invalid_request' } });
      const missing = await call('00000000-0000-4000-8000-000000000000', { code: '1' });
      expect(missing).toMatchObject({
        status: 404,
        body: { error: { code: 'session_not_found' } },
      });
      const junk = await call('queue', { code: '1' });
      expect(junk).toMatchObject({ status: 404, body: { error: { code: 'session_not_found' } } });
      const s = await open();
      const wrong = await call(s, { command: 'ls' }, { tool: 'run_shell' });
      expect(wrong).toMatchObject({ status: 400, body: { error: { code: 'invalid_request' } } });
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('a timeout interrupts the call (KeyboardInterrupt) and keeps the session', async () => {
      const s = await open();
      await stdout(s, 'kept = "yes"');
      const { body } = await call(s, {
        code: 'import time\nwhile True: time.sleep(0.05)',
        timeoutSeconds: 1,
      });
      expect(body).toMatchObject({ status: 'ok', result: { timedOut: true, exitCode: 130 } });
      expect(body.result.stderr).toContain('KeyboardInterrupt');
      expect(await stdout(s, 'print(kept)')).toBe('yes\n');
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('a session call’s output streams live on its events', async () => {
      const s = await open();
      const started = await stack.call('/tools/run_python/execute?wait=false', {
        json: {
          code: 'import time\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(0.3)',
        },
        headers: { 'x-toolgate-session': s },
      });
      const { id } = (await started.json()) as { id: string };
      // The stream ends after the outcome.
      const text = await (await stack.call(`/v1/calls/${id}/events`)).text();
      // Output events (an unbuffered print may come in pieces), each before the outcome.
      const events = text.split('\n\n').map((block) => ({
        type: /^event: (\w+)$/m.exec(block)?.[1],
        data: /^data: (.*)$/m.exec(block)?.[1],
      }));
      const outputs = events.filter((e) => e.type === 'output');
      expect(outputs.length).toBeGreaterThan(1);
      const printed = outputs.map((e) => (JSON.parse(e.data!) as { text: string }).text).join('');
      expect(printed).toBe('tick 0\ntick 1\ntick 2\n');
      expect(events.findIndex((e) => e.type === 'outcome')).toBeGreaterThan(
        events.lastIndexOf(outputs.at(-1)!),
      );
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('run_shell: a timeout interrupts the command and keeps the shell', async () => {
      const s = await open('run_shell');
      const shell = async (command: string, timeoutSeconds?: number) =>
        (
          await call(
            s,
            { command, ...(timeoutSeconds ? { timeoutSeconds } : {}) },
            { tool: 'run_shell' },
          )
        ).body;
      await shell('cd /tmp && KEPT=yes');
      const started = Date.now();
      expect(await shell('sleep 60; echo not-here', 1)).toMatchObject({
        status: 'ok',
        result: { stdout: '', timedOut: true, exitCode: 130 },
      });
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(await shell('echo "$KEPT $(pwd)"')).toMatchObject({
        result: { stdout: 'yes /tmp\n', exitCode: 0 },
      });
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('cancel interrupts the running call and keeps the session', async () => {
      const s = await open();
      await stdout(s, 'kept = 7');
      const started = await stack.call('/tools/run_python/execute?wait=false', {
        json: { code: 'import time\nprint("begun", flush=True)\ntime.sleep(60)' },
        headers: { 'x-toolgate-session': s },
      });
      const { id } = (await started.json()) as { id: string };
      // Running in the session's sandbox before the cancel.
      let status = '';
      for (let i = 0; i < 100 && status !== 'running'; i++) {
        if (i > 0) await new Promise((r) => setTimeout(r, 100));
        status = ((await (await stack.call(`/v1/calls/${id}`)).json()) as { status: string })
          .status;
      }
      expect(status).toBe('running');
      await new Promise((r) => setTimeout(r, 500));
      const cancelled = await stack.call(`/v1/calls/${id}/cancel`, { method: 'POST' });
      expect(await cancelled.json()).toMatchObject({ status: 'cancelled' });
      expect(await stdout(s, 'print(kept)')).toBe('7\n');
      await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('delete kills the session at once: its next call is session_not_found', async () => {
      const s = await open();
      await stdout(s, 'import os\nprint(os.getpid())');
      const before = sandbox.stats().processes ?? 0;
      const res = await stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
      expect(res.status).toBe(204);
      // The sandbox is gone within a second (the worker hears the delete on its channel).
      for (let i = 0; i < 50 && (sandbox.stats().processes ?? 0) >= before; i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(sandbox.stats().processes ?? 0).toBeLessThan(before);
      const next = await call(s, { code: 'print(1)' });
      expect(next).toMatchObject({ status: 404, body: { error: { code: 'session_not_found' } } });
      const list = (await (await stack.call('/v1/sessions')).json()) as {
        sessions: { id: string }[];
      };
      expect(list.sessions.map((x) => x.id)).not.toContain(s);
    });

    it('a memory bomb or a fork bomb in one session leaves another session alive', async () => {
      const victim = await open();
      const bystander = await open();
      await stdout(bystander, 'alive = "still"');
      await stdout(victim, 'before = 1');
      const fork = await call(victim, {
        code: 'import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; time.sleep(30); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print("fork refused after", n)',
        timeoutSeconds: 20,
      });
      expect(fork.body).toMatchObject({ status: 'ok' });
      expect(fork.body.result.stdout).toContain('fork refused after');
      expect(await stdout(bystander, 'print(alive)')).toBe('still\n');
      const bomb = await call(victim, {
        code: 'blocks = []\nwhile True: blocks.append(bytearray(16 * 1024 * 1024))',
        timeoutSeconds: 30,
      });
      // Either Python's MemoryError (the session lives on) or the kernel's OOM kill (it is lost).
      if (bomb.body.status === 'error') {
        expect(bomb.body.error.code).toBe('session_lost');
        expect(bomb.body.error.message).toContain('memory limit');
      } else {
        expect(bomb.body.result.stderr).toContain('MemoryError');
      }
      expect(await stdout(bystander, 'print(alive)')).toBe('still\n');
      for (const id of [victim, bystander])
        await stack.call(`/v1/sessions/${id}`, { method: 'DELETE' });
    }, 120_000);
  });
}

describe('sessions: idle expiry', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  let driver: DriverName | undefined;
  beforeAll(async () => {
    driver = (await whyDriverUnavailable('bwrap')) === undefined ? 'bwrap' : 'docker';
    dir = mkdtempSync(join(tmpdir(), 'toolgate-sessions-idle-'));
    chmodSync(dir, 0o711);
    sandbox = await createSandbox(testSandboxConfig(driver, dir));
    stack = await startStack({
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
      config: { clients, sessions: { idleSeconds: 2 } },
    });
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a session idle past sessions.idleSeconds ends: its sandbox is killed, its calls 404', async () => {
    const res = await stack.call('/v1/sessions', { json: { tool: 'run_python' } });
    const { id, expiresAt } = (await res.json()) as { id: string; expiresAt: string };
    expect(Date.parse(expiresAt) - Date.now()).toBeLessThanOrEqual(2000);
    const used = await stack.call('/tools/run_python/execute', {
      json: { code: 'x = 1' },
      headers: { 'x-toolgate-session': id },
    });
    const body = (await used.json()) as unknown;
    expect(body, JSON.stringify(body)).toMatchObject({ status: 'ok' });
    expect(sandbox.stats().processes).toBe(1);
    // Ended 2–3 s after its call (idleness is looked at each second), then its sandbox killed.
    const t0 = Date.now();
    while ((sandbox.stats().processes ?? 0) > 0 && Date.now() - t0 < 15_000)
      await new Promise((r) => setTimeout(r, 100));
    expect(sandbox.stats().processes ?? 0).toBe(0);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
    const later = await stack.call('/tools/run_python/execute', {
      json: { code: 'print(x)' },
      headers: { 'x-toolgate-session': id },
    });
    expect(later.status).toBe(404);
    expect(await later.json()).toMatchObject({ error: { code: 'session_not_found' } });
  }, 60_000);
});
