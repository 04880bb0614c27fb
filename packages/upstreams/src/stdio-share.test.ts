/**
 * One stdio server per worker host, against real bwrap sandboxes: supervisors sharing a share
 * directory (one stateDir) elect one owner, the others call its server through its socket.
 * Each supervisor here is what one worker process has; the election and the socket are the
 * same across processes (test/upstreams-host-share.test.ts runs them as real workers).
 */
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseConfig } from '@toolgate/config';
import { BwrapDriver } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamConnection } from './connection.js';
import { sharePaths, type StdioShare } from './stdio-share.js';
import { StdioServer } from './stdio-server.js';

/**
 * whoami (its boot token), progress (three notifications), log (a notifications/message); their
 * answers 0.3 s later; slow (2 s), hang / pending / cancelled, sh.
 */
const PROBE = String.raw`
import json, os, subprocess, sys, time, uuid
BOOT = uuid.uuid4().hex
def send(m): sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def text(id, t): send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": t}]}})
pending, cancelled = {}, []
for line in sys.stdin:
    msg = json.loads(line)
    method, id = msg.get("method"), msg.get("id")
    if method == "notifications/cancelled":
        rid = msg.get("params", {}).get("requestId")
        if rid in pending: cancelled.append(pending.pop(rid))
    if id is None: continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "probe", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": [{"name": n, "inputSchema": {"type": "object"}}
              for n in ("whoami", "progress", "log", "slow", "hang", "pending", "cancelled", "sh")]}})
    elif method == "tools/call":
        p = msg["params"]; name, args = p["name"], p.get("arguments") or {}
        if name == "whoami": text(id, BOOT)
        elif name == "progress":
            token = (p.get("_meta") or {}).get("progressToken")
            for i in range(3):
                if token is not None:
                    send({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": i + 1, "total": 3}})
            time.sleep(0.3); text(id, "done")
        elif name == "log":
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "log " + args.get("text", "")}})
            time.sleep(0.3); text(id, "logged")
        elif name == "slow": time.sleep(2); text(id, "slow done")
        elif name == "hang": pending[id] = args.get("text", "")
        elif name == "pending": text(id, json.dumps(list(pending.values())))
        elif name == "cancelled": text(id, json.dumps(cancelled))
        elif name == "sh":
            r = subprocess.run(["sh", "-c", args["command"]], capture_output=True, text=True)
            text(id, r.stdout + r.stderr)
`;

const reason = await whyDriverUnavailable('bwrap');
const silent = { info: () => undefined, warn: () => undefined, debug: () => undefined };

describe.skipIf(reason !== undefined)('one stdio server per host (bwrap)', () => {
  let dir: string;
  let driver: BwrapDriver;
  let servers: StdioServer[] = [];
  const upstream = parseConfig({
    upstreams: [{ id: 'probe', command: ['python3', '-u', '-c', PROBE], image: 'python' }],
  }).upstreams[0]!;
  const shareOf = (worker: string, stateDir = path.join(dir, 'state')): StdioShare => ({
    dir: path.join(stateDir, 'upstreams'),
    scope: 'test',
    worker,
  });
  const supervisor = (share: StdioShare) => {
    const server = new StdioServer(upstream, {
      open: (request) => driver.open(request),
      log: silent,
      share,
    });
    servers.push(server);
    return server;
  };
  const call = async (server: StdioServer, name: string, args = {}, signal?: AbortSignal) => {
    const connection = new UpstreamConnection(upstream, undefined as never, undefined, server);
    const result = await connection.call(name, args, `call-${Math.random()}`, {
      signal: signal ?? AbortSignal.timeout(20_000),
    });
    return (result.content[0] as { text: string }).text;
  };

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-share-'));
    await chmod(dir, 0o711);
    driver = new BwrapDriver(testSandboxConfig('bwrap', dir, { pool: { size: 0 } }));
    await driver.start();
  });
  afterEach(async () => {
    await Promise.all(servers.map((s) => s.close()));
    servers = [];
  });
  afterAll(async () => {
    await driver?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('three workers starting at once end with one owner and one server', async () => {
    const [a, b, c] = ['a', 'b', 'c'].map((w) => supervisor(shareOf(w)));
    const boots = await Promise.all([a!, b!, c!].map((s) => call(s, 'whoami')));
    expect(new Set(boots).size).toBe(1);
    const snaps = [a!, b!, c!].map((s) => s.snapshot());
    const owners = snaps.filter((s) => s.followers !== undefined);
    expect(owners).toHaveLength(1);
    expect(owners[0]).toMatchObject({ state: 'up', followers: 2 });
    const followers = snaps.filter((s) => s.shared);
    expect(followers).toHaveLength(2);
    const ownerName = ['a', 'b', 'c'][snaps.indexOf(owners[0]!)];
    for (const f of followers) expect(f).toMatchObject({ state: 'up', owner: ownerName });
    // The socket is the owner's alone.
    const { socket } = sharePaths(shareOf('x'), upstream);
    expect((await stat(socket)).mode & 0o777).toBe(0o600);
    expect((await stat(path.dirname(socket))).mode & 0o777).toBe(0o700);
  }, 60_000);

  it('a follower’s call gets its progress and its cancel reaches the server', async () => {
    const owner = supervisor(shareOf('owner'));
    await call(owner, 'whoami');
    const follower = supervisor(shareOf('follower'));
    const connection = new UpstreamConnection(upstream, undefined as never, undefined, follower);
    const seen: number[] = [];
    await connection.call('progress', {}, 'p1', {
      signal: AbortSignal.timeout(20_000),
      onProgress: (p) => seen.push(p),
    });
    expect(seen).toEqual([1, 2, 3]);
    expect(follower.snapshot()).toMatchObject({ shared: true, owner: 'owner' });

    const stop = new AbortController();
    const hung = call(follower, 'hang', { text: 'from the follower' }, stop.signal);
    await expect
      .poll(async () => JSON.parse(await call(owner, 'pending')) as string[], { timeout: 10_000 })
      .toEqual(['from the follower']);
    stop.abort(new Error('cancelled by the test'));
    await expect(hung).rejects.toThrow(/cancelled by the test/);
    await expect
      .poll(async () => JSON.parse(await call(owner, 'cancelled')) as string[], { timeout: 10_000 })
      .toEqual(['from the follower']);
  }, 60_000);

  it('a server’s log reaches a follower’s call only while it is the one call on the host', async () => {
    const owner = supervisor(shareOf('owner'));
    await call(owner, 'whoami');
    const follower = supervisor(shareOf('follower'));
    const connection = new UpstreamConnection(upstream, undefined as never, undefined, follower);
    const logged = async (text: string) => {
      const lines: string[] = [];
      await connection.call('log', { text }, `log-${text}`, {
        signal: AbortSignal.timeout(20_000),
        onLog: (_level, line) => lines.push(line),
      });
      return lines;
    };
    expect(await logged('alone')).toEqual(['log alone\n']);
    // The owner's own call in flight: the log could be either's, so it goes to neither.
    const stop = new AbortController();
    const hung = call(owner, 'hang', { text: 'owner' }, stop.signal).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 300));
    expect(await logged('crowded')).toEqual([]);
    stop.abort();
    await hung;
  }, 60_000);

  it('a dead owner’s stale socket is replaced; the follower’s next call gets a new server', async () => {
    const share = shareOf('w');
    const { socket } = sharePaths(share, upstream);
    // What an owner killed with -9 leaves: a socket file nobody listens on.
    const squatter = spawn('python3', [
      '-c',
      `import os, socket, time
os.makedirs(${JSON.stringify(path.dirname(socket))}, mode=0o700, exist_ok=True)
s = socket.socket(socket.AF_UNIX); s.bind(${JSON.stringify(socket)}); s.listen(); print("bound", flush=True); time.sleep(60)`,
    ]);
    await new Promise((r) => squatter.stdout.once('data', r));
    squatter.kill('SIGKILL');
    const first = supervisor(share);
    const boot = await call(first, 'whoami');
    expect(first.snapshot()).toMatchObject({ state: 'up', followers: 0 });

    const follower = supervisor(shareOf('f'));
    expect(await call(follower, 'whoami')).toBe(boot);
    // The owner goes away (its worker stops): the follower's next call elects it owner.
    await first.close();
    const next = await call(follower, 'whoami');
    expect(next).not.toBe(boot);
    expect(follower.snapshot()).toMatchObject({ state: 'up', followers: 0 });
  }, 60_000);

  it('a stopping owner stops listening and finishes its followers’ calls first', async () => {
    const owner = supervisor(shareOf('owner'));
    const boot = await call(owner, 'whoami');
    const follower = supervisor(shareOf('follower'));
    expect(await call(follower, 'whoami')).toBe(boot);
    const slow = call(follower, 'slow');
    await new Promise((r) => setTimeout(r, 500));
    const closing = owner.close();
    expect(await slow).toBe('slow done');
    await closing;
    const next = await call(follower, 'whoami');
    expect(next).not.toBe(boot);
  }, 60_000);

  it('two stateDirs are two hosts: two servers', async () => {
    const a = supervisor(shareOf('a', path.join(dir, 'state-1')));
    const b = supervisor(shareOf('b', path.join(dir, 'state-2')));
    expect(await call(a, 'whoami')).not.toBe(await call(b, 'whoami'));
    expect(a.snapshot().shared).toBeUndefined();
    expect(b.snapshot().shared).toBeUndefined();
  }, 60_000);

  it('the server’s own sandbox cannot see or reach the socket', async () => {
    const owner = supervisor(shareOf('owner'));
    await call(owner, 'whoami');
    const { socket } = sharePaths(shareOf('x'), upstream);
    const out = await call(owner, 'sh', {
      command: `ls -d ${path.dirname(socket)} 2>&1; python3 -c "import socket; s=socket.socket(socket.AF_UNIX); s.connect('${socket}')" 2>&1 | tail -1`,
    });
    expect(out).toMatch(/No such file or directory/);
    expect(out).not.toMatch(/^\//m);
    expect(out).toMatch(/FileNotFoundError|No such file/);
  }, 60_000);
});
