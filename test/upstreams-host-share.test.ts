/**
 * One stdio server per worker host (docs/upstreams.md): two real worker processes on one
 * stateDir share one sandboxed server, whichever takes a call; when the owner is killed with -9
 * the other starts a new one. bwrap only (the election and the socket do not depend on the
 * driver; packages/upstreams/src/stdio-share.test.ts has the unit cases).
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type Service } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

/**
 * whoami: the server's boot token (one per server start); pair: answered only once two pairs are
 * in flight at the server, so both workers' calls must reach the same server at once; hang:
 * never answered.
 */
const PROBE = String.raw`
import json, sys, uuid
BOOT = uuid.uuid4().hex
def send(m): sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def text(id, t): send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": t}]}})
pairs = []
for line in sys.stdin:
    msg = json.loads(line)
    method, id = msg.get("method"), msg.get("id")
    if id is None: continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "probe", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": [{"name": n, "inputSchema": {"type": "object"}}
              for n in ("whoami", "pair", "hang")]}})
    elif method == "tools/call":
        if msg["params"]["name"] == "whoami": text(id, BOOT)
        elif msg["params"]["name"] == "hang": pass
        else:
            pairs.append(id)
            if len(pairs) == 2:
                for p in pairs: text(p, "paired " + BOOT)
                pairs = []
`;

const reason = await whyDriverUnavailable('bwrap');
if (reason) console.warn(`host-shared stdio servers: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('one stdio server per worker host (bwrap)', () => {
  let dir: string;
  let stack: Stack;
  const workers: Service[] = [];
  const clients = [
    { id: 'alice', key: KEYS.alice, tools: ['*'] },
    { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
  ];
  const upstreams = [
    {
      id: 'probe',
      command: ['python3', '-u', '-c', PROBE],
      image: 'python',
      start: 'eager',
      trust: 'auto',
      timeoutMs: 20_000,
    },
  ];

  const run = async (tool: string) =>
    (await (await stack.call(`/tools/${tool}/execute`, { json: {} })).json()) as {
      status: string;
      result?: unknown;
      error?: { code: string; message: string };
    };
  const supervisors = async () => {
    const res = await stack.call('/v1/upstreams', { key: KEYS.admin });
    const body = (await res.json()) as {
      id: string;
      supervisors?: {
        worker: string;
        state: string;
        shared?: true;
        owner?: string;
        followers?: number;
      }[];
    }[];
    return body.find((u) => u.id === 'probe')?.supervisors ?? [];
  };
  const until = async <T>(what: () => Promise<T>, ok: (v: T) => boolean, ms = 30_000) => {
    const end = Date.now() + ms;
    for (;;) {
      const v = await what();
      if (ok(v) || Date.now() > end) return v;
      await new Promise((r) => setTimeout(r, 200));
    }
  };

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-host-share-'));
    await chmod(dir, 0o711);
    stack = await startStack({ worker: false, config: { clients, upstreams } });
    const sandbox = testSandboxConfig('bwrap', dir, { pool: { size: 0 } });
    const file = path.join(dir, 'toolgate.json');
    await writeFile(
      file,
      JSON.stringify({
        redis: stack.config.redis,
        clients,
        upstreams,
        // One fast slot each: two calls at once run on both workers.
        worker: { concurrency: 1, metricsPort: 0 },
        log: { level: 'info' },
        sandbox: {
          driver: 'bwrap',
          workspacesRoot: sandbox.workspacesRoot,
          stateDir: sandbox.stateDir,
          images: sandbox.images,
          pool: { size: 0 },
          workspaceQuota: 'off',
          bwrap: { seccompFilter: sandbox.bwrap.seccompFilter },
        },
      }),
    );
    for (let i = 0; i < 2; i++) {
      const worker = startService('worker', { TOOLGATE_CONFIG: file });
      workers.push(worker);
      await worker.waitFor(/worker started/, 60_000);
    }
  }, 120_000);
  afterAll(async () => {
    for (const w of workers) {
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGTERM');
      await w.exited;
    }
    await stack?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('two workers share one server; killing its owner with -9 makes the other start one', async () => {
    // Both eager workers joined: one owns the server, the other uses it.
    const joined = await until(
      supervisors,
      (s) => s.length === 2 && s.every((e) => e.state === 'up'),
    );
    const owner = joined.find((s) => s.followers !== undefined);
    const follower = joined.find((s) => s.shared);
    expect(owner).toMatchObject({ state: 'up', followers: 1 });
    expect(follower).toMatchObject({ state: 'up', shared: true, owner: owner?.worker });

    await until(
      () => run('probe__whoami'),
      (r) => r.status === 'ok',
    );
    // Two calls at once, one per worker (one slot each), meet at the one server.
    const [a, b] = await Promise.all([run('probe__pair'), run('probe__pair')]);
    expect(a).toMatchObject({ status: 'ok' });
    expect(b).toMatchObject({ status: 'ok' });
    expect(a.result).toBe(b.result);
    const boot = String(a.result).replace('paired ', '');
    expect(await run('probe__whoami')).toMatchObject({ status: 'ok', result: boot });

    // A call in flight on each worker (one slot each) when the owner dies.
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await stack.call('/tools/probe__hang/execute?wait=false', { json: {} });
      expect(res.status).toBe(202);
      ids.push(((await res.json()) as { id: string }).id);
    }
    const status = async (id: string) =>
      (await (await stack.call(`/v1/calls/${id}`)).json()) as {
        status: string;
        error?: { code: string; message: string };
      };
    await until(
      () => Promise.all(ids.map(status)),
      (all) => all.every((c) => c.status === 'running'),
    );

    const victim = workers.find((w) => owner!.worker.includes(`-${w.child.pid}-`));
    expect(victim).toBeDefined();
    victim!.child.kill('SIGKILL');
    await victim!.exited;
    const killedAt = Date.now();
    // The follower's call hears at once that the server went with its owner (not at timeoutMs,
    // 20 s); the owner's own call is the dead worker's (worker_lost, docs/reliability.md).
    const ended = await until(
      () => Promise.all(ids.map(status)),
      (all) => all.every((c) => c.status !== 'running' && c.status !== 'queued'),
    );
    const codes = ended.map((c) => c.error?.code).sort();
    expect(codes, JSON.stringify(ended)).toEqual(['upstream_unavailable', 'worker_lost']);
    expect(ended.find((c) => c.error?.code === 'upstream_unavailable')?.error?.message).toContain(
      'the stdio server ended during hang',
    );
    expect(Date.now() - killedAt).toBeLessThan(20_000);
    const after = await until(
      () => run('probe__whoami'),
      (r) => r.status === 'ok',
    );
    expect(after.status).toBe('ok');
    expect(after.result).not.toBe(boot);
    const survivor = await until(supervisors, (s) =>
      s.some((e) => e.worker === follower!.worker && e.followers === 0),
    );
    expect(survivor.find((e) => e.worker === follower!.worker)).toMatchObject({
      state: 'up',
      followers: 0,
    });
  }, 120_000);
});
