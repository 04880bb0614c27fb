/**
 * The stdio supervisor against real bwrap sandboxes: a server that keeps failing is started
 * again later each time (backoff), an eager one comes back by itself after a crash, and a call
 * that comes while an idle one is being stopped gets a new one.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseConfig } from '@toolgate/config';
import { BwrapDriver, type SandboxProcess } from '@toolgate/sandbox';
import {
  testSandboxConfig,
  whyDriverUnavailable,
  whyNodeImageUnavailable,
} from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StdioServers } from './stdio-server.js';

/**
 * Tool `who` answers after half a second with a word of its own (which sandbox ran it); any
 * other tool crashes the server.
 */
const SERVER = String.raw`
import json, os, sys, time
WHO = os.urandom(8).hex()
for line in sys.stdin:
    msg = json.loads(line)
    id = msg.get("id")
    if id is None: continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "s", "version": "1"}}
    elif msg["method"] == "tools/call":
        if msg["params"]["name"] != "who": os._exit(3)
        time.sleep(0.5)
        result = {"content": [{"type": "text", "text": WHO}]}
    else:
        result = {"tools": []}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": id, "result": result}) + "\n")
    sys.stdout.flush()
`;

const reason = await whyDriverUnavailable('bwrap');
const noNode = await whyNodeImageUnavailable('bwrap');
const silent = { info: () => undefined, warn: () => undefined, debug: () => undefined };

describe.skipIf(reason !== undefined)('StdioServer (bwrap)', () => {
  let dir: string;
  let driver: BwrapDriver;
  const upstream = (id: string, command: string[], extra: Record<string, unknown> = {}) =>
    parseConfig({
      upstreams: [{ id, command, image: 'python', timeoutMs: 10_000, ...extra }],
    }).upstreams[0]!;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-stdio-server-'));
    await chmod(dir, 0o711);
    driver = new BwrapDriver(testSandboxConfig('bwrap', dir, { pool: { size: 0 } }));
    await driver.start();
  });
  afterAll(async () => {
    await driver?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('waits longer before each start of a server that keeps failing', async () => {
    const servers = new StdioServers(
      [upstream('failing', ['python3', '-c', 'raise SystemExit(3)'])],
      {
        open: (r) => driver.open(r),
        log: silent,
        backoff: { initialMs: 300, maxMs: 5000, factor: 2 },
      },
    );
    const server = servers.get('failing')!;
    const attempt = async () => {
      const t0 = Date.now();
      const err = await server.connect(AbortSignal.timeout(20_000)).then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      return { ms: Date.now() - t0, err };
    };
    const first = await attempt();
    expect(first.err?.message).toContain('did not start');
    expect(server.state).toBe('backoff');
    const second = await attempt();
    const third = await attempt();
    expect(second.err).toBeDefined();
    expect(third.err).toBeDefined();
    // 300 ms, then 600 ms before the start even begins.
    expect(second.ms).toBeGreaterThanOrEqual(300);
    expect(third.ms).toBeGreaterThanOrEqual(600);
    await servers.close();
    expect(driver.stats().processes).toBe(0);
  });

  it('an eager server that crashes comes back by itself, with a new sandbox', async () => {
    const servers = new StdioServers(
      [upstream('eager', ['python3', '-u', '-c', SERVER], { start: 'eager' })],
      {
        open: (r) => driver.open(r),
        log: silent,
        backoff: { initialMs: 200, maxMs: 1000, factor: 2 },
      },
    );
    const server = servers.get('eager')!;
    const started: number[] = [];
    server.onStarted = () => started.push(Date.now());
    servers.startEager();
    for (let i = 0; i < 100 && server.state !== 'up'; i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(server.state).toBe('up');
    const client = await server.connect(AbortSignal.timeout(5000));
    const crashed = await client.callTool({ name: 'anything', arguments: {} }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(crashed).toBeDefined();
    // No call asks for it: the supervisor starts it again after the backoff.
    for (let i = 0; i < 100 && started.length < 2; i++) await new Promise((r) => setTimeout(r, 50));
    expect(started.length).toBe(2);
    expect(server.state).toBe('up');
    expect(await server.connect(AbortSignal.timeout(5000))).not.toBe(client);
    expect(driver.stats().processes).toBe(1);
    await servers.close();
    expect(server.state).toBe('stopped');
    expect(driver.stats().processes).toBe(0);
  });

  it.skipIf(noNode !== undefined)(
    'an npm server the image does not have fails to start, saying so',
    async () => {
      const u = parseConfig({
        upstreams: [{ id: 'pad', npm: 'left-pad@1.3.0', timeoutMs: 10_000 }],
      }).upstreams[0]!;
      const servers = new StdioServers([u], { open: (r) => driver.open(r), log: silent });
      const err = await servers
        .get('pad')!
        .connect(AbortSignal.timeout(20_000))
        .then(
          () => undefined,
          (e: unknown) => e as Error & { code?: string },
        );
      expect(err?.code).toBe('upstream_unavailable');
      expect(err?.message).toContain('left-pad@1.3.0: not installed in this image');
      expect(err?.message).toContain('SANDBOX_NPM_SERVERS');
      await servers.close();
    },
  );

  it('a call that comes while an idle server is being stopped gets a new server, not the one going away; close() waits for both', async () => {
    // A docker sandbox takes a while to kill: the first one here takes 1.5 s before it goes.
    let killing = 0;
    const servers = new StdioServers(
      [upstream('sleepy', ['python3', '-u', '-c', SERVER], { idleSeconds: 1 })],
      {
        open: async (r) => {
          const proc = await driver.open(r);
          const slowKill: SandboxProcess = {
            driver: proc.driver,
            stdin: proc.stdin,
            stdout: proc.stdout,
            stderr: proc.stderr,
            exited: proc.exited,
            signal: (name) => proc.signal(name),
            stats: () => proc.stats(),
            kill: async () => {
              // The first (the idle stop's) only: close() must wait for it, not for its own.
              if (++killing === 1) await new Promise((resolve) => setTimeout(resolve, 1500));
              await proc.kill();
            },
          };
          return slowKill;
        },
        log: silent,
      },
    );
    const server = servers.get('sleepy')!;
    const call = async () => {
      server.begin();
      try {
        const client = await server.connect(AbortSignal.timeout(10_000));
        return await client.callTool({ name: 'who', arguments: {} });
      } finally {
        server.end();
      }
    };
    const first = await call();
    // The idle check stops it within idleSeconds + a second; a call comes at once.
    for (let i = 0; i < 400 && killing === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(killing).toBe(1);
    expect(server.state).toBe('idle');
    const second = await call();
    expect(second.isError).toBeFalsy();
    expect(second.content).not.toEqual(first.content);
    expect(server.state).toBe('up');
    // The old one still going: close() waits for it too.
    expect(driver.stats().processes).toBe(2);
    await servers.close();
    expect(driver.stats().processes).toBe(0);
  });
});
