/**
 * Issue 31: admin views across Redis shards. Three real redis-server processes are the shards,
 * a client on each, the admin on the first. An admin's listings (approvals and their live feed,
 * audit, calls, stats, budgets, sessions) merge every shard; an admin's action on a client's
 * data (approve, workspace reset, secrets, ending a session) runs on that client's shard; with
 * one shard killed (kill -9) the listings answer from the others and name the missing one.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type {
  AdminSessionList,
  ApprovalEvent,
  AuditList,
  BudgetReport,
  CallList,
  PendingApproval,
  SeriesView,
  ShardList,
} from '@toolgate/gateway';
import { Keys, SessionStore, createRedis, type StatsReport } from '@toolgate/calls';
import { ShardMap } from '@toolgate/config';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startShardServers, type RedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

const CAROL = 'carol-key-0123456789abcdef';
const DOWN = 'toolgate-shards-unavailable';

let servers: Record<'s0' | 's1' | 's2', RedisServer>;
let stack: Stack;
const prefix = `sa${randomUUID().slice(0, 6)}`;
const budget = { calls: { day: 1000 } };

beforeAll(async () => {
  let shards;
  ({ servers, shards } = await startShardServers(['s0', 's1', 's2'] as const));
  stack = await startStack({
    tools: testTools,
    config: {
      redis: {
        prefix,
        shards,
      },
      secrets: { key: randomBytes(32).toString('hex') },
      server: { port: 0, host: '127.0.0.1', queueDashboard: { enabled: true } },
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'], shard: 's0', limits: { budget } },
        { id: 'bob', key: KEYS.bob, tools: ['*'], shard: 's1', limits: { budget } },
        { id: 'carol', key: CAROL, tools: ['*'], shard: 's2', limits: { budget } },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true, shard: 's1' },
      ],
    },
  });
}, 60_000);

afterAll(async () => {
  await stack?.close();
  await Promise.all(Object.values(servers ?? {}).map((s) => s.stop()));
});

const owners = { alice: KEYS.alice, bob: KEYS.bob, carol: CAROL } as const;
const asAdmin = async <T>(path: string, init: RequestInit & { json?: unknown } = {}) => {
  const res = await stack.call(path, { key: KEYS.admin, ...init });
  const text = await res.text();
  return {
    status: res.status,
    down: res.headers.get(DOWN),
    body: (text ? JSON.parse(text) : undefined) as T,
  };
};
const run = async (tool: string, args: unknown, key: string) =>
  (await (await stack.call(`/tools/${tool}/execute`, { json: args, key })).json()) as {
    id: string;
    status: string;
  };
async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  let v = await read();
  for (let i = 0; i < 200 && !ok(v); i++) {
    await new Promise((r) => setTimeout(r, 50));
    v = await read();
  }
  return v;
}
async function onShard<T>(server: RedisServer, read: (r: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
  try {
    return await read(redis);
  } finally {
    redis.disconnect();
  }
}
/** A session record on a shard, as a worker's create leaves it (no sandbox needed to list it). */
async function sessionOn(shardId: string, clientId: string): Promise<string> {
  const shard = new ShardMap(stack.config).byId(shardId)!;
  const redis = createRedis(shard.redis, 'command');
  try {
    const store = new SessionStore(redis, Keys.for(shard.redis), 30_000);
    await store.beat(`w-${shardId}`);
    const made = await store.create({
      clientId,
      tool: 'run_python',
      workerId: `w-${shardId}`,
      cap: 4,
      idleMs: 600_000,
      lifetimeMs: 600_000,
    });
    if (!made.created) throw new Error(`no session: ${JSON.stringify(made)}`);
    return made.id;
  } finally {
    redis.disconnect();
  }
}

describe('admin views across three shards', () => {
  const calls: Record<string, string> = {};
  it('lists every client’s calls, audit entries and stats in one merged answer', async () => {
    for (const [client, key] of Object.entries(owners)) {
      const done = await run('calculator', { expression: '6*7' }, key);
      expect(done.status).toBe('ok');
      calls[client] = done.id;
    }
    const list = await asAdmin<CallList>('/v1/calls?limit=50');
    expect(list.status).toBe(200);
    expect(list.down).toBeNull();
    const listed = list.body.calls.map((c) => c.id);
    for (const id of Object.values(calls)) expect(listed).toContain(id);
    // Newest first, across shards.
    const times = list.body.calls.map((c) => Date.parse(c.createdAt));
    expect(times).toEqual([...times].sort((a, b) => b - a));
    // Any client's call, looked up by id wherever it lives; and one client's list, on its shard.
    for (const [client, id] of Object.entries(calls)) {
      const one = await asAdmin<{ id: string; client: string }>(`/v1/calls/${id}`);
      expect(one).toMatchObject({ status: 200, body: { id, client } });
    }
    const carols = await asAdmin<CallList>('/v1/calls?client=carol');
    expect(carols.body.calls.map((c) => c.id)).toContain(calls.carol);

    const audit = await until(
      () => asAdmin<AuditList>('/v1/audit?event=call'),
      (a) => Object.values(calls).every((id) => a.body.some((e) => e.callId === id)),
    );
    expect(audit.status).toBe(200);
    expect(new Set(audit.body.map((e) => e.client))).toEqual(new Set(['alice', 'bob', 'carol']));
    const at = audit.body.map((e) => e.at);
    expect(at).toEqual([...at].sort().reverse());
    expect((await asAdmin<AuditList>('/v1/audit?event=call&limit=2')).body).toHaveLength(2);

    const stats = await until(
      () => asAdmin<StatsReport>('/v1/stats'),
      (s) => (s.body.tools.find((t) => t.tool === 'calculator')?.calls ?? 0) >= 3,
    );
    expect(stats.body.tools.find((t) => t.tool === 'calculator')?.calls).toBe(3);
    expect(new Set(stats.body.recent.map((c) => c.client))).toEqual(
      new Set(['alice', 'bob', 'carol']),
    );
    const carolStats = await asAdmin<StatsReport>('/v1/stats?client=carol');
    expect(carolStats.body.tools.find((t) => t.tool === 'calculator')?.calls).toBe(1);

    const budgets = await asAdmin<BudgetReport>('/v1/budget');
    expect(budgets.body.clients?.map((c) => [c.client, c.budget.calls?.[0]?.used])).toEqual([
      ['alice', 1],
      ['bob', 1],
      ['carol', 1],
    ]);
    const series = await asAdmin<SeriesView>('/v1/series?minutes=5');
    expect(series.body.tools.calculator?.calls.reduce((a, b) => a + b, 0)).toBe(3);
  });

  it('sees every shard’s pending approvals, live too, and approves a call parked on another shard', async () => {
    const events: ApprovalEvent[] = [];
    const stop = new AbortController();
    const res = await fetch(`${stack.url}/v1/approvals/events`, {
      headers: { authorization: `Bearer ${KEYS.admin}` },
      signal: stop.signal,
    });
    const reading = (async () => {
      const decoder = new TextDecoder();
      let buffer = '';
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          buffer += decoder.decode(chunk, { stream: true });
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const data = /^data: (.*)$/m.exec(buffer.slice(0, end))?.[1];
            buffer = buffer.slice(end + 2);
            if (data) events.push(JSON.parse(data) as ApprovalEvent);
          }
        }
      } catch {
        // aborted
      }
    })();
    await until(
      async () => events,
      (e) => e.some((x) => x.type === 'snapshot'),
    );
    const bobs = await run('wipe_disk', { disk: 'sda' }, KEYS.bob);
    const carols = await run('wipe_disk', { disk: 'sdb' }, CAROL);
    expect([bobs.status, carols.status]).toEqual(['pending_approval', 'pending_approval']);
    await until(
      async () => events,
      (e) => e.filter((x) => x.type === 'parked').length >= 2,
    );

    const pending = await asAdmin<PendingApproval[]>('/v1/approvals');
    expect(pending.body.map((p) => p.id)).toEqual([bobs.id, carols.id]);

    const approved = await asAdmin<{ status: string }>(`/v1/approvals/${carols.id}/approve`, {
      method: 'POST',
      json: {},
    });
    expect(approved.status).toBe(200);
    const ran = await until(
      () => asAdmin<{ status: string; result?: unknown }>(`/v1/calls/${carols.id}`),
      (c) => c.body.status === 'ok',
    );
    expect(ran.body).toMatchObject({ status: 'ok', result: 'wiped sdb' });
    // Recorded with carol's data, on her shard's audit.
    const decided = await asAdmin<AuditList>(`/v1/audit?event=approval&callId=${carols.id}`);
    expect(decided.body).toEqual([
      expect.objectContaining({ client: 'carol', status: 'approved', by: 'ops' }),
    ]);
    // An admin cancels bob's parked call (on s1) too.
    const cancelled = await asAdmin<{ status: string }>(`/v1/calls/${bobs.id}/cancel`, {
      method: 'POST',
    });
    expect(cancelled.body.status).toBe('cancelled');
    await until(
      async () => events,
      (e) => e.some((x) => x.type === 'decided') && e.some((x) => x.type === 'cancelled'),
    );
    stop.abort();
    await reading;
    expect(events.filter((e) => e.type === 'parked')).toEqual([
      expect.objectContaining({
        approval: expect.objectContaining({ id: bobs.id, client: 'bob' }),
      }),
      expect.objectContaining({
        approval: expect.objectContaining({ id: carols.id, client: 'carol' }),
      }),
    ]);
    expect(events).toContainEqual(
      expect.objectContaining({ type: 'decided', id: carols.id, decision: 'approved' }),
    );
  });

  it('resets workspaces, sets secrets and ends sessions on the client’s shard, not the admin’s', async () => {
    // The admin is on s1: carol's reset id goes to her shard (s2), where workers read it
    // (services/worker/src/client-stores.ts).
    expect((await asAdmin(`/v1/workspaces/carol`, { method: 'DELETE' })).status).toBe(202);
    const resets = `${prefix}:workspace-resets`;
    for (const [id, server] of Object.entries(servers))
      expect([id, await onShard(server, (r) => r.hexists(resets, 'carol'))]).toEqual([
        id,
        id === 's2' ? 1 : 0,
      ]);

    const put = await asAdmin(`/v1/secrets/carol/API_TOKEN`, {
      method: 'PUT',
      json: { value: 'x1' },
    });
    expect(put.status).toBe(201);
    for (const [id, server] of Object.entries(servers)) {
      const keys = await onShard(server, (r) => r.keys(`${prefix}:secret:carol`));
      expect(keys).toEqual(id === 's2' ? [`${prefix}:secret:carol`] : []);
    }
    const listed = await asAdmin<{ secrets: { name: string }[] }>(`/v1/secrets/carol`);
    expect(listed.body.secrets.map((s) => s.name)).toEqual(['API_TOKEN']);

    const bobSession = await sessionOn('s1', 'bob');
    const carolSession = await sessionOn('s2', 'carol');
    const sessions = await asAdmin<AdminSessionList>('/v1/admin/sessions');
    expect(sessions.body.sessions.map((s) => [s.id, s.clientId])).toEqual(
      expect.arrayContaining([
        [bobSession, 'bob'],
        [carolSession, 'carol'],
      ]),
    );
    expect(sessions.body.total).toBe(2);
    expect((await asAdmin(`/v1/admin/sessions/${carolSession}`, { method: 'DELETE' })).status).toBe(
      204,
    );
    const after = await asAdmin<AdminSessionList>('/v1/admin/sessions');
    expect(after.body.sessions.map((s) => s.id)).toEqual([bobSession]);
  });

  it('shows every shard’s queues on the BullMQ dashboard, named by shard', async () => {
    const jobs = await stack.call('/tools/sleep/execute', {
      key: CAROL,
      json: { ms: 1 },
      headers: { prefer: 'respond-async' },
    });
    expect(jobs.status).toBe(202);
    const res = await stack.call('/admin/queues/api/queues?activeQueue=s2:fast&status=latest', {
      key: KEYS.admin,
    });
    expect(res.status).toBe(200);
    const { queues } = (await res.json()) as {
      queues: { name: string; description?: string }[];
    };
    for (const shard of ['s0', 's1', 's2'])
      for (const kind of ['fast', 'sandbox'])
        expect(queues.map((q) => q.name)).toContain(`${shard}:${kind}`);
    expect(queues.find((q) => q.name === 's2:fast')?.description).toMatch(/on shard s2$/);
  });

  it('with one shard killed, listings answer from the others and name the missing shard', async () => {
    expect((await asAdmin<ShardList>('/v1/shards')).body.shards).toEqual([
      { id: 's0', home: true, state: 'up', clients: ['alice'], moving: [] },
      { id: 's1', home: false, state: 'up', clients: ['bob', 'ops'], moving: [] },
      { id: 's2', home: false, state: 'up', clients: ['carol'], moving: [] },
    ]);
    // A client is not an admin: no shard list.
    expect((await stack.call('/v1/shards', { key: KEYS.alice })).status).toBe(403);

    servers.s2.child.kill('SIGKILL');
    await servers.s2.stop();
    const shards = await until(
      () => asAdmin<ShardList>('/v1/shards'),
      (s) => s.body.shards.find((x) => x.id === 's2')?.state === 'down',
    );
    expect(shards.body.shards.map((s) => s.state)).toEqual(['up', 'up', 'down']);

    const list = await asAdmin<CallList>('/v1/calls?limit=50');
    expect(list).toMatchObject({ status: 200, down: 's2' });
    expect(list.body.calls.map((c) => c.id)).toEqual(
      expect.arrayContaining([calls.alice, calls.bob]),
    );
    const audit = await asAdmin<AuditList>('/v1/audit?event=call');
    expect(audit).toMatchObject({ status: 200, down: 's2' });
    expect(new Set(audit.body.map((e) => e.client))).toEqual(new Set(['alice', 'bob']));
    const stats = await asAdmin<StatsReport>('/v1/stats');
    expect(stats).toMatchObject({ status: 200, down: 's2' });
    expect(stats.body.tools.find((t) => t.tool === 'calculator')?.calls).toBe(2);
    for (const path of ['/v1/approvals', '/v1/admin/sessions', '/v1/budget', '/v1/series']) {
      const res = await asAdmin(path);
      expect([path, res.status, res.down]).toEqual([path, 200, 's2']);
    }
    // A call on the lost shard cannot be found: 503 naming it, not 404 nor 500.
    const lost = await asAdmin<{ error: { code: string; details: unknown } }>(
      `/v1/calls/${calls.carol}`,
    );
    expect(lost.status).toBe(503);
    expect(lost.body.error).toMatchObject({ code: 'shard_unavailable', details: { shard: 's2' } });
    // The others' calls are still found.
    expect((await asAdmin(`/v1/calls/${calls.bob}`)).status).toBe(200);
  });
});

describe('an admin’s rate across shards', () => {
  let two: Record<'a' | 'b', RedisServer>;
  let small: Stack;
  beforeAll(async () => {
    let shards;
    ({ servers: two, shards } = await startShardServers(['a', 'b'] as const));
    small = await startStack({
      config: {
        redis: { prefix: `sr${randomUUID().slice(0, 6)}`, shards },
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['*'], shard: 'a' },
          // Three requests a minute; the admin's data on the other shard than alice's.
          {
            id: 'ops',
            key: KEYS.admin,
            tools: ['*'],
            admin: true,
            shard: 'b',
            rateLimit: { perMinute: 3 },
          },
        ],
      },
    });
  });
  afterAll(async () => {
    await small?.close();
    await Promise.all(Object.values(two ?? {}).map((s) => s.stop()));
  });

  it('charges each request once: a merged view and one served on the client’s shard alike', async () => {
    const asAdmin = (path: string) => small.call(path, { key: KEYS.admin });
    // Both shards connected first (a request while one still connects goes uncharged).
    for (let i = 0; i < 100 && (await small.call('/readyz', { key: null })).status !== 200; i++)
      await new Promise((r) => setTimeout(r, 50));
    // Merged from both shards, then served on alice's shard: one call of the rate each.
    expect((await asAdmin('/v1/audit')).status).toBe(200);
    expect((await asAdmin('/v1/calls?client=alice')).status).toBe(200);
    expect((await asAdmin('/v1/stats')).status).toBe(200);
    const over = await asAdmin('/v1/audit');
    expect(over.status).toBe(429);
    expect(((await over.json()) as { error: { code: string } }).error.code).toBe('rate_limited');
  });
});
