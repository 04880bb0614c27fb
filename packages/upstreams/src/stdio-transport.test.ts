/**
 * The SDK's MCP client over a sandboxed stdio server (SandboxStdioTransport), on both real
 * sandbox drivers. The server is a small one of our own in Python (the python image has no
 * Node): initialize, tools/list, tools/call of `echo`, `env`, `slow` and `crash`.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, ProtocolError, SdkError } from '@modelcontextprotocol/client';
import { BwrapDriver, type DriverName, type SandboxDriver } from '@toolgate/sandbox';
import { DockerDriver } from '@toolgate/sandbox/docker';
import {
  testSandboxConfig,
  whyDriverUnavailable,
  whyNodeImageUnavailable,
} from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  SandboxStdioTransport,
  STDIO_MAX_MESSAGE_BYTES,
  STDIO_OVERSIZE_ERROR,
} from './stdio-transport.js';

const SERVER = String.raw`
import json, os, sys, time
TOOLS = [
    {"name": name, "description": name, "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
    for name in ("echo", "env", "slow", "crash", "big", "bigfirst", "bignoid")
]
BIG = "x" * (50 * 1024 * 1024)
def reply(id, result=None, error=None):
    msg = {"jsonrpc": "2.0", "id": id}
    if error is not None: msg["error"] = error
    else: msg["result"] = result
    sys.stdout.write(json.dumps(msg) + "\n"); sys.stdout.flush()
print("stdio server up", file=sys.stderr, flush=True)
sys.stdout.write("not json: a stray print the client must skip\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, id = msg.get("method"), msg.get("id")
    if id is None: continue
    if method == "initialize":
        reply(id, {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                   "serverInfo": {"name": "sandboxed", "version": "1.0.0"}})
    elif method == "tools/list":
        reply(id, {"tools": TOOLS})
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
        if name == "echo":
            reply(id, {"content": [{"type": "text", "text": "Echo: " + args.get("text", "")}]})
        elif name == "env":
            reply(id, {"content": [{"type": "text", "text": json.dumps(dict(os.environ))}]})
        elif name == "slow":
            time.sleep(30)
        elif name == "crash":
            os._exit(3)
        elif name == "big":  # 50 MB, the id last (as the MCP SDK writes it)
            sys.stdout.write('{"result": {"content": [{"type": "text", "text": "' + BIG + '"}]}, "jsonrpc": "2.0", "id": ' + json.dumps(id) + '}\n'); sys.stdout.flush()
        elif name == "bigfirst":  # the id first
            sys.stdout.write('{"jsonrpc": "2.0", "id": ' + json.dumps(id) + ', "result": {"content": [{"type": "text", "text": "' + BIG + '"}]}}\n'); sys.stdout.flush()
        elif name == "bignoid":  # no id at either end: nothing to answer
            sys.stdout.write('{"result": {"content": [{"type": "text", "text": "' + BIG + '"}], "id": 1}}\n'); sys.stdout.flush()
    elif method == "ping":
        reply(id, {})
    else:
        reply(id, error={"code": -32601, "message": "Method not found: " + str(method)})
`;

const drivers: DriverName[] = ['docker', 'bwrap'];
const reasons = Object.fromEntries(
  await Promise.all(drivers.map(async (d) => [d, await whyDriverUnavailable(d)] as const)),
) as Record<DriverName, string | undefined>;

describe.each(drivers)('SandboxStdioTransport on %s', (driverName) => {
  let dir: string;
  let driver: SandboxDriver;
  const skip = reasons[driverName] !== undefined;

  const connect = async () => {
    const stderr: string[] = [];
    const exits: unknown[] = [];
    const transport = new SandboxStdioTransport({
      open: () => driver.open({ image: 'python', argv: ['python3', '-u', '-c', SERVER] }),
      onStderr: (line) => stderr.push(line),
      onExit: (exit) => exits.push(exit),
    });
    const client = new Client({ name: 'toolgate-test', version: '0.0.0' });
    client.onerror = () => undefined;
    await client.connect(transport, { timeout: 20_000 });
    return { client, transport, stderr, exits };
  };
  const text = (r: unknown) =>
    ((r as { content: { type: string; text: string }[] }).content[0]?.text ?? '') as string;

  beforeAll(async () => {
    if (skip) return;
    dir = await mkdtemp(path.join(tmpdir(), `tg-stdio-${driverName}-`));
    await chmod(dir, 0o711);
    const config = testSandboxConfig(driverName, dir, { pool: { size: 0 } });
    driver = driverName === 'docker' ? new DockerDriver(config) : new BwrapDriver(config);
    await driver.start();
  });
  afterAll(async () => {
    await driver?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(skip)(
    'lists and calls the sandboxed server’s tools, several calls at once',
    async () => {
      const { client, transport, stderr } = await connect();
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toEqual([
        'echo',
        'env',
        'slow',
        'crash',
        'big',
        'bigfirst',
        'bignoid',
      ]);
      const answers = await Promise.all(
        ['a', 'b', 'c'].map((t) => client.callTool({ name: 'echo', arguments: { text: t } })),
      );
      expect(answers.map(text)).toEqual(['Echo: a', 'Echo: b', 'Echo: c']);
      expect(stderr).toContain('stdio server up');
      // The worker's environment stays outside.
      process.env.TOOLGATE_STDIO_TEST_SECRET = 'not-for-upstreams';
      try {
        const env = JSON.parse(
          text(await client.callTool({ name: 'env', arguments: {} })),
        ) as Record<string, string>;
        expect(env.TOOLGATE_STDIO_TEST_SECRET).toBeUndefined();
        expect(env.HOME).toBe('/tmp');
      } finally {
        delete process.env.TOOLGATE_STDIO_TEST_SECRET;
      }
      await client.close();
      expect(transport.sandbox).toBeUndefined();
    },
  );

  it.skipIf(skip)(
    'a crash mid-call fails the call at once and closes the session; a new one works',
    async () => {
      const { client, exits } = await connect();
      const closed = new Promise<void>((resolve) => (client.onclose = resolve));
      const started = Date.now();
      const failure = await client
        .callTool({ name: 'crash', arguments: {} }, { timeout: 20_000 })
        .then(
          () => undefined,
          (err: unknown) => err,
        );
      expect(failure).toBeInstanceOf(SdkError);
      // Failed by the server's end, not by the request's 20 s timeout.
      expect(Date.now() - started).toBeLessThan(10_000);
      await closed;
      expect(exits).toEqual([{ exitCode: 3, oomKilled: false, killed: false }]);
      const again = await connect();
      expect(text(await again.client.callTool({ name: 'echo', arguments: { text: 'x' } }))).toBe(
        'Echo: x',
      );
      await again.client.close();
    },
  );

  it.skipIf(skip)(
    'a 50 MB answer fails only its own request; the session goes on (unless it has no id)',
    async () => {
      const { client, transport, exits } = await connect();
      for (const name of ['big', 'bigfirst']) {
        const failure = await client.callTool({ name, arguments: {} }, { timeout: 30_000 }).then(
          () => undefined,
          (err: unknown) => err,
        );
        expect(failure).toBeInstanceOf(ProtocolError);
        expect((failure as ProtocolError).code).toBe(STDIO_OVERSIZE_ERROR);
        expect((failure as Error).message).toContain(String(STDIO_MAX_MESSAGE_BYTES));
        // The same session, the same sandbox, still answering.
        expect(
          text(await client.callTool({ name: 'echo', arguments: { text: `after ${name}` } })),
        ).toBe(`Echo: after ${name}`);
      }
      expect(exits).toEqual([]);
      // No id to answer: the session ends, so the request fails at once, not at its timeout.
      const started = Date.now();
      const lost = await client
        .callTool({ name: 'bignoid', arguments: {} }, { timeout: 30_000 })
        .then(
          () => undefined,
          (err: unknown) => err,
        );
      expect(lost).toBeInstanceOf(SdkError);
      expect(Date.now() - started).toBeLessThan(20_000);
      expect(transport.sandbox).toBeUndefined();
    },
  );

  it.skipIf(skip)('close() during a call kills the server’s sandbox', async () => {
    const { client, exits } = await connect();
    const pending = client.callTool({ name: 'slow', arguments: {} }).catch((err: unknown) => err);
    await new Promise((r) => setTimeout(r, 200));
    await client.close();
    expect(await pending).toBeInstanceOf(Error);
    expect(exits).toEqual([{ exitCode: 137, oomKilled: false, killed: true }]);
  });
});

const nodeReasons = Object.fromEntries(
  await Promise.all(drivers.map(async (d) => [d, await whyNodeImageUnavailable(d)] as const)),
) as Record<DriverName, string | undefined>;

describe.each(drivers)('server-everything over stdio in the node image on %s', (driverName) => {
  const skip = nodeReasons[driverName] !== undefined;
  let dir: string;
  let driver: SandboxDriver;

  beforeAll(async () => {
    if (skip) return;
    dir = await mkdtemp(path.join(tmpdir(), `tg-stdio-node-${driverName}-`));
    await chmod(dir, 0o711);
    const config = testSandboxConfig(driverName, dir, { pool: { size: 0 } });
    driver = driverName === 'docker' ? new DockerDriver(config) : new BwrapDriver(config);
    await driver.start();
  });
  afterAll(async () => {
    await driver?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(skip)('the pinned npm server answers echo through the SDK client', async () => {
    const transport = new SandboxStdioTransport({
      open: () =>
        driver.open({
          image: 'node',
          argv: [
            'node',
            '/opt/toolgate/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js',
            'stdio',
          ],
        }),
    });
    const client = new Client({ name: 'toolgate-test', version: '0.0.0' });
    client.onerror = () => undefined;
    await client.connect(transport, { timeout: 20_000 });
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toContain('echo');
    const r = await client.callTool({ name: 'echo', arguments: { message: 'from the sandbox' } });
    expect((r as { content: { text: string }[] }).content[0]?.text).toBe('Echo: from the sandbox');
    await client.close();
  });
});
