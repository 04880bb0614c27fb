/**
 * Stdio upstreams (docs/upstreams.md): MCP servers run inside the worker's sandboxes, through
 * the whole path (HTTP and MCP → gateway → fast queue → worker → sandboxed server). The real
 * `server-everything` and `server-filesystem` (npm, pinned, in the node image), and a probe
 * server of our own in Python for what they cannot show: a crash mid-call, idleness, and
 * what a sandboxed server can reach.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  createSandbox,
  createWorkspaces,
  type DriverName,
  type Sandbox,
  type Workspaces,
} from '@toolgate/sandbox';
import { testSandboxConfig, whyNodeImageUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, TOOLGATE_BIN } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

/** A line-per-message MCP server: echo, env, read (a path), list (a directory), slow, crash. */
const PROBE = String.raw`
import json, os, sys, time
def tool(name, props):
    return {"name": name, "description": name,
            "inputSchema": {"type": "object", "properties": {p: {"type": "string"} for p in props}}}
TOOLS = [tool("echo", ["text"]), tool("env", []), tool("read", ["path"]), tool("list", ["path"]),
         tool("slow", []), tool("crash", [])]
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n"); sys.stdout.flush()
def text(id, t):
    send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": t}]}})
for line in sys.stdin:
    msg = json.loads(line)
    method, id = msg.get("method"), msg.get("id")
    if id is None: continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "probe", "version": "1.0.0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
        if name == "echo": text(id, "probe: " + args.get("text", ""))
        elif name == "env": text(id, json.dumps(dict(os.environ)))
        elif name == "read":
            try: text(id, open(args["path"]).read())
            except Exception as e: text(id, "unreadable: " + type(e).__name__)
        elif name == "list":
            try: text(id, json.dumps(sorted(os.listdir(args["path"]))))
            except Exception as e: text(id, "unlistable: " + type(e).__name__)
        elif name == "slow": time.sleep(60)
        elif name == "crash": os._exit(3)
    else:
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no " + str(method)}})
`;

const EVERYTHING = '@modelcontextprotocol/server-everything@2026.8.31';
const FILESYSTEM = '@modelcontextprotocol/server-filesystem@2026.8.31';

const drivers: DriverName[] = ['bwrap', 'docker'];
const reasons = Object.fromEntries(
  await Promise.all(drivers.map(async (d) => [d, await whyNodeImageUnavailable(d)] as const)),
) as Record<DriverName, string | undefined>;
for (const d of drivers)
  if (reasons[d]) console.warn(`stdio upstreams on ${d}: skipped, ${reasons[d]}`);

async function until<T>(what: () => Promise<T> | T, ok: (v: T) => boolean, ms = 15_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await what();
    if (ok(value) || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.each(drivers)('stdio upstreams in %s sandboxes', (driverName) => {
  const skip = reasons[driverName] !== undefined;
  let stack: Stack;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  let dir: string;
  let hostSecret: string;
  let closed = false;

  const run = async (tool: string, args: unknown, key: string = KEYS.alice) =>
    (await (await stack.call(`/tools/${tool}/execute`, { json: args, key })).json()) as {
      status: string;
      result?: unknown;
      error?: { code: string; message: string };
    };

  beforeAll(async () => {
    if (skip) return;
    dir = await mkdtemp(path.join(tmpdir(), `tg-stdio-e2e-${driverName}-`));
    // The sandbox uid (10001) must reach the workspaces below it (as with a real workspacesRoot).
    await chmod(dir, 0o711);
    hostSecret = path.join(dir, 'host-secret.txt');
    await writeFile(hostSecret, 'the host only');
    sandbox = await createSandbox(testSandboxConfig(driverName, dir, { pool: { size: 0 } }));
    workspaces = createWorkspaces(sandbox.config);
    await writeFile(path.join(await workspaces.ensure('alice'), 'hello.txt'), 'alice was here');
    await writeFile(path.join(await workspaces.ensure('bob'), 'bob.txt'), 'bob only');
    process.env.TOOLGATE_WORKER_SECRET = 'not-for-upstreams';
    stack = await startStack({
      services: { sandbox, workspaces },
      config: {
        upstreams: [
          { id: 'everything', npm: EVERYTHING, args: ['stdio'], trust: 'auto', start: 'eager' },
          { id: 'fs', npm: FILESYSTEM, args: ['/workspace'], workspace: 'alice', trust: 'auto' },
          {
            id: 'probe',
            command: ['python3', '-u', '-c', PROBE],
            image: 'python',
            workspace: 'alice',
            idleSeconds: 2,
            timeoutMs: 15_000,
            trust: 'auto',
          },
        ],
      },
    });
  }, 120_000);
  afterAll(async () => {
    delete process.env.TOOLGATE_WORKER_SECRET;
    if (!closed) await stack?.close();
    await sandbox?.close();
    await workspaces?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(skip)(
    'calls server-everything (npm, sandboxed) through HTTP execute and MCP',
    async () => {
      expect(await run('everything__echo', { message: 'hi' })).toMatchObject({
        status: 'ok',
        result: 'Echo: hi',
      });
      const mcp = new Client({ name: 'test', version: '1' });
      await mcp.connect(
        new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${KEYS.alice}` } },
        }),
      );
      const listed = await mcp.listTools();
      expect(listed.tools.map((t) => t.name)).toEqual(
        expect.arrayContaining(['everything__echo', 'fs__read_text_file', 'probe__echo']),
      );
      const result = await mcp.callTool({
        name: 'everything__echo',
        arguments: { message: 'mcp' },
      });
      expect(JSON.stringify(result.content)).toContain('Echo: mcp');
      await mcp.close();
    },
  );

  it.skipIf(skip)(
    'toolgate doctor lists each upstream’s state, and whether the image has an npm server',
    async () => {
      const file = path.join(dir, 'doctor.json');
      await writeFile(
        file,
        JSON.stringify({
          redis: stack.config.redis,
          sandbox: { driver: driverName },
          upstreams: [
            { id: 'everything', npm: EVERYTHING, args: ['stdio'] },
            { id: 'missing', npm: 'left-pad@1.3.0' },
          ],
        }),
      );
      const stdout = await new Promise<string>((resolve) =>
        execFile(
          process.execPath,
          [TOOLGATE_BIN, 'doctor', '--json', '--config', file],
          { cwd: ROOT, env: { PATH: process.env.PATH ?? '', HOME: dir }, timeout: 60_000 },
          (_err, out) => resolve(out),
        ),
      );
      const checks = JSON.parse(stdout) as { name: string; status: string; detail: string }[];
      const check = (name: string) => checks.find((c) => c.name === name);
      expect(check('upstream everything')).toMatchObject({
        status: 'ok',
        detail: expect.stringMatching(/^npm .*: up, \d+ tools/),
      });
      expect(check('upstream everything npm')).toMatchObject({ status: 'ok' });
      expect(check('upstream missing')).toMatchObject({ status: 'warn' });
      expect(check('upstream missing npm')).toMatchObject({
        status: 'fail',
        detail: expect.stringContaining('left-pad'),
      });
    },
  );

  it.skipIf(skip)("server-filesystem sees its client's workspace and nothing else", async () => {
    expect(await run('fs__read_text_file', { path: '/workspace/hello.txt' })).toMatchObject({
      status: 'ok',
      result: { content: 'alice was here' },
    });
    const outside = await run('fs__read_text_file', { path: hostSecret });
    expect(JSON.stringify(outside)).not.toContain('the host only');
  });

  it.skipIf(skip)(
    "a sandboxed server cannot read the host, the worker's environment or another client's workspace",
    async () => {
      const env = await run('probe__env', {});
      expect(env.status).toBe('ok');
      expect(JSON.stringify(env)).not.toContain('not-for-upstreams');
      expect(await run('probe__read', { path: hostSecret })).toMatchObject({
        result: 'unreadable: FileNotFoundError',
      });
      const bobs = path.join(await workspaces.ensure('bob'), 'bob.txt');
      expect(await run('probe__read', { path: bobs })).toMatchObject({
        result: 'unreadable: FileNotFoundError',
      });
      expect(await run('probe__list', { path: '/workspace' })).toMatchObject({
        result: '["hello.txt"]',
      });
    },
  );

  it.skipIf(skip)(
    'a crash mid-call answers upstream_unavailable, then the server is back',
    async () => {
      expect(await run('probe__echo', { text: 'before' })).toMatchObject({
        result: 'probe: before',
      });
      const t0 = Date.now();
      const crashed = await run('probe__crash', {});
      expect(crashed).toMatchObject({ status: 'error', error: { code: 'upstream_unavailable' } });
      expect(crashed.error?.message).toContain('stdio server ended');
      // Answered when the server died, not at the call's 15 s timeout.
      expect(Date.now() - t0).toBeLessThan(10_000);
      // Restarted (after its 1 s backoff) by the next call.
      expect(await run('probe__echo', { text: 'after' })).toMatchObject({
        status: 'ok',
        result: 'probe: after',
      });
    },
  );

  it.skipIf(skip)(
    'stops a server idle for idleSeconds, and starts it again on the next call',
    async () => {
      expect(await run('probe__echo', { text: 'wake' })).toMatchObject({ result: 'probe: wake' });
      const running = () => sandbox.stats().processes ?? 0;
      const busy = running();
      expect(busy).toBeGreaterThanOrEqual(2); // everything (eager) and probe at least
      // idleSeconds: 2 — the probe's sandbox goes; the others (idleSeconds 300) stay.
      expect(await until(running, (n) => n === busy - 1)).toBe(busy - 1);
      expect(await run('probe__echo', { text: 'again' })).toMatchObject({ result: 'probe: again' });
      expect(running()).toBe(busy);
    },
  );

  it.skipIf(skip)('leaves no sandbox behind when the worker stops', async () => {
    expect(sandbox.stats().processes).toBeGreaterThan(0);
    await stack.close();
    closed = true;
    expect(sandbox.stats().processes).toBe(0);
    // The workspace the server wrote nothing to is as it was.
    expect(await readdir(await workspaces.ensure('alice'))).toEqual(['hello.txt']);
    expect(await readFile(path.join(await workspaces.ensure('alice'), 'hello.txt'), 'utf8')).toBe(
      'alice was here',
    );
  });
});
