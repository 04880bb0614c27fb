/**
 * Code mode through the whole path (issue 23 §2): HTTP → gateway → sandbox queue → worker →
 * sandbox running the script → its channel → the worker → the gateway's pipeline for each
 * nested call (scope, rate, approval, audit, cancel) → back into the script.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Type, defineTool } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

const CAROL = 'carol-key-0123456789abcdef';
const DAVE = 'dave-key-0123456789abcdef0';
const ERIN = 'erin-key-0123456789abcdef0';
const MAX_CALLS = 30;
/** The bwrap stack's codeMode.maxResultBytes. */
const MAX_RESULT_BYTES = 65_536;

/** A nested call that runs until cancelled: what it saw is recorded here. */
const held = { started: 0, aborted: 0 };
const holdTool = defineTool({
  name: 'hold',
  description: 'Waits until cancelled (or 60 s)',
  category: 'test',
  parameters: Type.Object({}),
  timeoutMs: 60_000,
  handler: async (_args, ctx) => {
    held.started++;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 60_000);
      ctx.signal.addEventListener('abort', () => {
        held.aborted++;
        clearTimeout(t);
        resolve();
      });
    });
    return 'released';
  },
});

/** Counts its runs: a retried call answered from its idempotency key does not run again. */
let runs = 0;
const countTool = defineTool({
  name: 'count_runs',
  description: 'Counts its runs',
  category: 'test',
  parameters: Type.Object({}),
  handler: () => ++runs,
});

/** A local HTTP server the scripts fetch from: /item/<n> answers a small JSON document. */
async function itemServer(): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    const big = /^\/big\/(\d+)$/.exec(req.url ?? '')?.[1];
    if (big) return void res.writeHead(200).end('b'.repeat(Number(big)));
    const n = /^\/item\/(\d+)$/.exec(req.url ?? '')?.[1];
    if (!n) return void res.writeHead(404).end();
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ id: Number(n), price: Number(n) * 10, notes: 'x'.repeat(400) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return { server, url: `http://127.0.0.1:${address.port}` };
}

interface Outcome {
  id: string;
  status: string;
  result?: { stdout: string; stderr: string; exitCode: number };
  error?: { code: string; message: string };
}

/** The script that fetches 20 items and prints one line. */
const twentyFetches = (base: string) => `
total = 0
for i in range(20):
    r = toolgate.http_get(url=f"${base}/item/{i}")
    total += __import__("json").loads(r["body"])["price"]
print(f"20 items, total price {total}")
`;

async function startCodeModeStack(
  driver: 'docker' | 'bwrap',
  dir: string,
  codeMode: Record<string, unknown> = {},
) {
  const sandbox = await createSandbox(testSandboxConfig(driver, dir));
  await sandbox.warmUp(60_000);
  const port = await freePort();
  const stack = await startStack({
    tools: [holdTool, countTool],
    port,
    services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
    config: {
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'] },
        { id: 'carol', key: CAROL, tools: ['run_code_with_tools', 'http_get', 'calculator'] },
        {
          id: 'dave',
          key: DAVE,
          tools: ['run_code_with_tools', 'calculator'],
          rateLimit: { perMinute: 10 },
        },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
        // One sandbox slot: the script holds it (a nested sandboxed call fails fast).
        { id: 'erin', key: ERIN, tools: ['*'], limits: { sandboxInFlight: 1 } },
      ],
      policy: {
        http: { allowHosts: ['127.0.0.1'] },
        loopGuard: { maxCalls: 1000 },
        approval: { tools: ['file_delete'] },
      },
      codeMode: { gatewayUrl: `http://127.0.0.1:${port}`, maxCalls: MAX_CALLS, ...codeMode },
    },
  });
  return { sandbox, stack };
}

const runScript = async (
  stack: Stack,
  code: string,
  key: string = KEYS.alice,
  query = '',
): Promise<Outcome> =>
  (await (
    await stack.call(`/tools/run_code_with_tools/execute${query}`, { json: { code }, key })
  ).json()) as Outcome;

async function eventually<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000) {
  const deadline = Date.now() + ms;
  let value = await read();
  while (!ok(value) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    value = await read();
  }
  return value;
}

const dockerReason = await whyDriverUnavailable('docker');
const bwrapReason = await whyDriverUnavailable('bwrap');
if (dockerReason) console.warn(`code-mode (docker): skipped, ${dockerReason}`);
if (bwrapReason) console.warn(`code-mode (bwrap): skipped, ${bwrapReason}`);

describe.skipIf(dockerReason !== undefined)('code mode (docker)', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  let items: { server: Server; url: string };
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-codemode-'));
    await chmod(dir, 0o711);
    items = await itemServer();
    ({ stack, sandbox } = await startCodeModeStack('docker', dir));
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    items?.server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('a script calls http_get 20 times and returns one line; the audit shows each child with parentCallId', async () => {
    const out = await runScript(stack, twentyFetches(items.url));
    expect(out).toMatchObject({ status: 'ok', result: { exitCode: 0, stderr: '' } });
    expect(out.result!.stdout).toBe('20 items, total price 1900\n');
    const children = await eventually(
      async () =>
        (await (
          await stack.call('/v1/audit?client=alice&tool=http_get&limit=200', { key: KEYS.admin })
        ).json()) as { parentCallId?: string; status: string; callId: string }[],
      (entries) => entries.filter((e) => e.parentCallId === out.id).length >= 20,
    );
    const mine = children.filter((e) => e.parentCallId === out.id);
    expect(mine).toHaveLength(20);
    expect(new Set(mine.map((e) => e.callId)).size).toBe(20);
    expect(mine.every((e) => e.status === 'ok')).toBe(true);
    // Each child is a call of its own, readable by its client.
    const child = await (await stack.call(`/v1/calls/${mine[0]!.callId}`)).json();
    expect(child).toMatchObject({ tool: 'http_get', status: 'ok' });
  });

  it('the listing describes the functions compactly, per client', async () => {
    const tools = (await (await stack.call('/tools', { key: CAROL })).json()) as {
      name: string;
      description: string;
    }[];
    const description = tools.find((t) => t.name === 'run_code_with_tools')!.description;
    expect(description).toContain('- http_get:');
    expect(description).toContain('- calculator:');
    expect(description).not.toContain('run_shell');
    expect(description.length).toBeLessThanOrEqual(4000);
    const help = await runScript(
      stack,
      'import json\nh = toolgate.help("http_get")\nprint(h["parameters"]["required"])\nprint(toolgate.http_get.__doc__.splitlines()[0][:20])\nprint(toolgate.tools())',
      CAROL,
    );
    expect(help.result!.stdout).toMatch(/^\['url'\]\n.+\n\['calculator', 'http_get'\]\n$/);
  });

  it('a nested call outside the scope gets the 403 a model would get, as toolgate.ToolError', async () => {
    const asModel = await stack.call('/tools/run_shell/execute', {
      json: { command: 'ls' },
      key: CAROL,
    });
    expect(asModel.status).toBe(403);
    const modelError = ((await asModel.json()) as { error: { code: string; message: string } })
      .error;
    const out = await runScript(
      stack,
      `try:
    toolgate.call("run_shell", command="ls")
except toolgate.ToolError as e:
    print(e.code)
    print(e.message)`,
      CAROL,
    );
    expect(out.result!.stdout).toBe(`${modelError.code}\n${modelError.message}\n`);
  });

  it('a nested sandboxed call with sandboxInFlight 1 fails at once with code_mode_sandbox_slot; in-process ones run', async () => {
    // Before: run_shell waited for the slot the script itself holds, until the script's timeout.
    const out = await runScript(
      stack,
      `try:
    toolgate.run_shell(command="echo nested")
except toolgate.ToolError as e:
    print(e.code)
    print(e.message)
print(toolgate.calculator(expression="6*7"))`,
      ERIN,
    );
    expect(out.status).toBe('ok');
    expect(out.result!.stdout).toBe(
      'code_mode_sandbox_slot\n' +
        '"run_shell" runs in a sandbox, and this script holds the only sandbox slot its caller may use (limits.sandboxInFlight: 1): the call could start only after the script ends\n' +
        '42\n',
    );
  });

  it('a nested file_delete parks the script until an admin approves, then it resumes', async () => {
    const accepted = await runScript(
      stack,
      `toolgate.file_write(path="doomed.txt", content="bye")
r = toolgate.file_delete(path="doomed.txt")
print("deleted", r["deleted"])`,
      KEYS.alice,
      '?wait=false',
    );
    const pending = await eventually(
      async () =>
        (await (await stack.call('/v1/approvals', { key: KEYS.admin })).json()) as {
          id: string;
          tool: string;
        }[],
      (list) => list.some((a) => a.tool === 'file_delete'),
    );
    const parked = pending.find((a) => a.tool === 'file_delete')!;
    // The script is still running, parked on its child.
    expect(await (await stack.call(`/v1/calls/${accepted.id}`)).json()).toMatchObject({
      status: 'running',
    });
    const approve = await stack.call(`/v1/approvals/${parked.id}/approve`, {
      key: KEYS.admin,
      method: 'POST',
    });
    expect(approve.status).toBe(200);
    const done = await eventually(
      async () => (await (await stack.call(`/v1/calls/${accepted.id}`)).json()) as Outcome,
      (c) => c.status !== 'running' && c.status !== 'queued',
    );
    expect(done).toMatchObject({ status: 'ok', result: { stdout: 'deleted file\n' } });
  }, 40_000);

  it('the rate limit counts the nested calls', async () => {
    const out = await runScript(
      stack,
      `codes = []
for i in range(15):
    try:
        toolgate.calculator(expression=f"{i}+1")
        codes.append("ok")
    except toolgate.ToolError as e:
        codes.append(e.code)
print(codes.count("ok"), codes.count("rate_limited"))`,
      DAVE,
    );
    const [ok, limited] = out.result!.stdout.trim().split(' ').map(Number);
    // 10 a minute: the script's own call took one.
    expect(ok).toBeLessThanOrEqual(9);
    expect(limited).toBe(15 - ok!);
    expect(limited).toBeGreaterThan(0);
  });

  it(`a script makes at most codeMode.maxCalls (${MAX_CALLS}) nested calls`, async () => {
    const out = await runScript(
      stack,
      `n = 0
try:
    for i in range(${MAX_CALLS + 5}):
        toolgate.calculator(expression=f"{i}*2")
        n += 1
except toolgate.ToolError as e:
    print(n, e.code)`,
    );
    expect(out.result!.stdout).toBe(`${MAX_CALLS} code_mode_max_calls\n`);
  });

  it('a nested call cannot start code mode (depth 1)', async () => {
    const out = await runScript(
      stack,
      `for name, args in [("run_code_with_tools", {"code": "print(1)"}), ("run_python", {"code": "print(1)", "tools": True})]:
    try:
        toolgate.call(name, args)
    except toolgate.ToolError as e:
        print(name, e.code)`,
    );
    expect(out.result!.stdout).toBe(
      'run_code_with_tools code_mode_depth\nrun_python code_mode_depth\n',
    );
  });

  it('a nested call with an idempotency key runs once', async () => {
    const out = await runScript(
      stack,
      `a = toolgate.call("count_runs", idempotency_key="once")
b = toolgate.call("count_runs", idempotency_key="once")
c = toolgate.count_runs()
print(a == b, c == a + 1)`,
    );
    expect(out.result!.stdout).toBe('True True\n');
  });

  it('the nested-call route takes only a live capability, never a client key', async () => {
    for (const key of ['tgcm_forged0123456789', KEYS.alice]) {
      const res = await stack.call('/v1/code-mode/calls', {
        key,
        json: { tool: 'calculator', args: { expression: '1+1' } },
      });
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({ error: { code: 'unauthorized' } });
      expect((await stack.call('/v1/code-mode/tools', { key })).status).toBe(401);
    }
  });

  it('run_python with tools: true is code mode too', async () => {
    const res = await stack.call('/tools/run_python/execute', {
      json: { code: 'print(toolgate.calculator(expression="6*7"))', tools: true },
    });
    expect(await res.json()).toMatchObject({ status: 'ok', result: { stdout: '42\n' } });
  });

  it('a script killed at its own timeout cancels the child it was waiting for', async () => {
    const before = held.aborted;
    const res = await stack.call('/tools/run_code_with_tools/execute', {
      json: { code: 'toolgate.hold()', timeoutSeconds: 2 },
    });
    const out = (await res.json()) as Outcome & { result: { timedOut: boolean } };
    expect(out).toMatchObject({ status: 'ok', result: { timedOut: true } });
    const child = await eventually(
      async () =>
        (
          (await (await stack.call('/v1/calls?tool=hold&limit=5')).json()) as {
            calls: { id: string; status: string; createdAt: number }[];
          }
        ).calls.sort((a, b) => b.createdAt - a.createdAt)[0],
      (c) => c?.status === 'cancelled',
    );
    expect(child?.status).toBe('cancelled');
    expect(held.aborted).toBe(before + 1);
  }, 40_000);

  it('cancelling the script cancels its running child', async () => {
    const before = held.aborted;
    const accepted = await runScript(stack, 'toolgate.hold()', KEYS.alice, '?wait=false');
    const child = await eventually(
      async () =>
        (
          (await (await stack.call('/v1/calls?tool=hold&limit=5')).json()) as {
            calls: { id: string; status: string }[];
          }
        ).calls.find((c) => c.status === 'running'),
      (c) => c !== undefined,
    );
    expect(child).toBeDefined();
    const cancel = await stack.call(`/v1/calls/${accepted.id}/cancel`, { method: 'POST' });
    expect([200, 202]).toContain(cancel.status);
    const ended = await eventually(
      async () => (await (await stack.call(`/v1/calls/${child!.id}`)).json()) as Outcome,
      (c) => c.status === 'cancelled',
    );
    expect(ended.status).toBe('cancelled');
    expect(held.aborted).toBe(before + 1);
  }, 40_000);
});

describe.skipIf(bwrapReason !== undefined)('code mode (bwrap)', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  let items: { server: Server; url: string };
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-codemode-bw-'));
    await chmod(dir, 0o711);
    items = await itemServer();
    ({ stack, sandbox } = await startCodeModeStack('bwrap', dir, {
      approval: 'fail',
      maxResultBytes: MAX_RESULT_BYTES,
    }));
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    items?.server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('a script calls http_get 20 times and returns one line', async () => {
    const out = await runScript(stack, twentyFetches(items.url));
    expect(out).toMatchObject({ status: 'ok', result: { exitCode: 0 } });
    expect(out.result!.stdout).toBe('20 items, total price 1900\n');
  });

  it(`a script receives at most codeMode.maxResultBytes (${MAX_RESULT_BYTES}) of results`, async () => {
    const out = await runScript(
      stack,
      `n = 0
try:
    for i in range(10):
        toolgate.http_get(url="${items.url}/big/20000")
        n += 1
except toolgate.ToolError as e:
    print(n, e.code)`,
    );
    // Three answers of ~20 KB fit in 64 KiB, the fourth does not.
    expect(out.result!.stdout).toBe('3 code_mode_bytes\n');
  });

  it('a request over 1 MiB is refused request_too_large', async () => {
    const out = await runScript(
      stack,
      `import json, socket, struct
try:
    toolgate.calculator(expression="1" * (2 * 1024 * 1024))
except toolgate.ToolError as e:
    print(e.code)
# The worker's own bound, whatever the client: a frame announcing 2 MiB.
s = socket.socket(socket.AF_UNIX)
s.connect("/run/toolgate/sock")
s.sendall(struct.pack(">I", 2 * 1024 * 1024) + b"{")
(n,) = struct.unpack(">I", s.recv(4))
print(json.loads(s.recv(n))["error"]["code"])`,
    );
    expect(out.result!.stdout).toBe('request_too_large\nrequest_too_large\n');
  });

  it('with codeMode.approval: fail a nested file_delete fails at once with approval_required', async () => {
    const out = await runScript(
      stack,
      `try:
    toolgate.file_delete(path="x.txt")
except toolgate.ToolError as e:
    print(e.code)`,
    );
    expect(out.result!.stdout).toBe('approval_required\n');
    const pending = (await (
      await stack.call('/v1/approvals', { key: KEYS.admin })
    ).json()) as unknown[];
    expect(pending).toHaveLength(0);
  });
});
