/**
 * Issue 31: one worker serves every Redis shard. Three redis-server processes as shards, clients
 * pinned to each; calls are queued the way the gateway queues them (CallQueue.enqueue, on the
 * client's shard) and must end with their records on their own shard only, within the worker's
 * slots in total, a hot shard not starving another, and a shard killed and restarted costing
 * only its own calls' wait.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  CallQueue,
  CallStore,
  FINAL_STATUSES,
  Keys,
  createRedis,
  type CallJob,
  type QueueKind,
  type RedisClient,
} from '@toolgate/calls';
import { parseConfig, ShardMap, type Config } from '@toolgate/config';
import { createLogger } from '@toolgate/log';
import { Type, defineTool, type ToolServices } from '@toolgate/registry';
import { createToolRegistry } from '@toolgate/tools';
import { createWorker, type ToolWorker } from '@toolgate/worker';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisServer } from './support/redis-server.js';

/** What the worker ran, in start order, and how many at once at most (per queue). */
const starts: string[] = [];
const runningNow = { fast: 0, sandbox: 0 };
const mostAtOnce = { fast: 0, sandbox: 0 };

const hold = defineTool({
  name: 'hold',
  description: 'Holds a slot for ms milliseconds, counting how many run at once',
  category: 'test',
  parameters: Type.Object({
    ms: Type.Integer({ minimum: 0, maximum: 60_000 }),
    label: Type.String(),
    queue: Type.Union([Type.Literal('fast'), Type.Literal('sandbox')]),
  }),
  timeoutMs: 30_000,
  handler: async ({ ms, label, queue }) => {
    starts.push(label);
    runningNow[queue]++;
    mostAtOnce[queue] = Math.max(mostAtOnce[queue], runningNow[queue]);
    try {
      await new Promise((r) => setTimeout(r, ms));
    } finally {
      runningNow[queue]--;
    }
    return { label };
  },
});

const SHARDS = ['s0', 's1', 's2'] as const;
type ShardId = (typeof SHARDS)[number];
/** Each client's shard. */
const CLIENT_SHARD: Record<string, ShardId> = { ann: 's0', ben: 's1', cat: 's2' };

let servers: Record<ShardId, RedisServer>;
let aofDir: string;
const connections: RedisClient[] = [];
let worker: ToolWorker | undefined;

async function startServer(id: ShardId, port?: number): Promise<RedisServer> {
  // s2 keeps its data across a kill -9 (every write fsynced): its queued calls outlive it.
  return id === 's2'
    ? startRedisServer(port, ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', aofDir])
    : startRedisServer(port);
}

beforeAll(async () => {
  aofDir = mkdtempSync(path.join(tmpdir(), 'toolgate-shard-'));
  const [s0, s1, s2] = await Promise.all(SHARDS.map((id) => startServer(id)));
  servers = { s0: s0!, s1: s1!, s2: s2! };
});

afterEach(async () => {
  await worker?.close();
  worker = undefined;
});

afterAll(async () => {
  for (const c of connections) c.disconnect();
  await Promise.all(Object.values(servers).map((s) => s.stop()));
  rmSync(aofDir, { recursive: true, force: true });
});

function shardedConfig(worker: Record<string, unknown>): Config {
  return parseConfig(
    {
      redis: {
        prefix: `sw${randomUUID().slice(0, 6)}`,
        shards: SHARDS.map((id) => ({
          id,
          url: servers[id].url,
          ...(id === 's0' ? { home: true } : {}),
        })),
      },
      log: { level: 'silent' },
      worker: { metricsPort: 0, ...worker },
      clients: Object.entries(CLIENT_SHARD).map(([id, shard]) => ({
        id,
        key: `${id}-key-0123456789abcdef`,
        tools: ['*'],
        shard,
        limits: { queued: 1000, sandboxInFlight: 100 },
      })),
    },
    {},
  );
}

/** The gateway's side on each shard: its queues and call records. */
function shardSides(config: Config) {
  const map = new ShardMap(config);
  return Object.fromEntries(
    map.list.map((shard) => {
      const redis = createRedis(shard.redis, 'command');
      connections.push(redis);
      const keys = Keys.for(shard.redis);
      return [
        shard.id,
        {
          redis,
          keys,
          store: new CallStore(redis, keys, 600),
          queues: {
            fast: new CallQueue(redis, keys, 'fast'),
            sandbox: new CallQueue(redis, keys, 'sandbox'),
          },
        },
      ];
    }),
  ) as Record<
    ShardId,
    { redis: RedisClient; keys: Keys; store: CallStore; queues: Record<QueueKind, CallQueue> }
  >;
}

async function startShardedWorker(config: Config): Promise<ToolWorker> {
  const w = createWorker({
    config,
    registry: createToolRegistry([hold]),
    logger: createLogger('test', { level: (process.env.TEST_LOG_LEVEL as 'silent') ?? 'silent' }),
    services: {} as ToolServices,
  });
  worker = w;
  await w.start();
  return w;
}

/** Queues a `hold` call of `client` on its shard, as the gateway does; its id. */
async function enqueue(
  sides: ReturnType<typeof shardSides>,
  client: string,
  queue: QueueKind,
  ms: number,
  label: string,
): Promise<string> {
  const job: CallJob = {
    id: randomUUID(),
    tool: 'hold',
    args: { ms, label, queue },
    clientId: client,
    acceptedAt: Date.now(),
  };
  const admit = await sides[CLIENT_SHARD[client]!].queues[queue].enqueue(job, 0, 3_600_000, false);
  expect(admit.admitted).toBe(true);
  return job.id;
}

/** Polls the call's record on its shard until it has ended; its status. */
async function ended(
  sides: ReturnType<typeof shardSides>,
  client: string,
  id: string,
  timeoutMs = 30_000,
): Promise<string> {
  const side = sides[CLIENT_SHARD[client]!];
  const until = Date.now() + timeoutMs;
  for (;;) {
    const record = await side.store.get(id).catch(() => undefined);
    if (record && FINAL_STATUSES.has(record.status)) return record.status;
    if (Date.now() > until) throw new Error(`call ${id} of ${client} did not end`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function reset(): void {
  starts.length = 0;
  mostAtOnce.fast = mostAtOnce.sandbox = 0;
}

describe('a worker serving three Redis shards', () => {
  it("runs each shard's calls with their records on that shard and nowhere else", async () => {
    reset();
    const config = shardedConfig({ concurrency: 4 });
    const sides = shardSides(config);
    await startShardedWorker(config);
    const calls = await Promise.all(
      Object.keys(CLIENT_SHARD).flatMap((client) =>
        [0, 1, 2].map(async (i) => ({
          client,
          id: await enqueue(sides, client, i === 2 ? 'sandbox' : 'fast', 10, `${client}${i}`),
        })),
      ),
    );
    for (const { client, id } of calls) expect(await ended(sides, client, id)).toBe('ok');
    // The worker's connections on a shard that is not home (this test's one is not counted).
    const clients = (await sides.s1.redis.client('LIST')) as string;
    console.warn(
      `sharded worker: ${clients.trim().split('\n').length - 1} connections on shard s1`,
    );
    for (const { client, id } of calls) {
      for (const shard of SHARDS) {
        const found = await sides[shard].redis.keys(`*${id}*`);
        if (shard === CLIENT_SHARD[client]) expect(found.length).toBeGreaterThan(0);
        else expect(found, `${client}'s call on ${shard}`).toEqual([]);
      }
    }
  });

  it('runs at most its slots in total across the shards, and all of them', async () => {
    reset();
    const config = shardedConfig({ concurrency: 2, sandboxConcurrency: 2, sandboxReserve: 1 });
    const sides = shardSides(config);
    await startShardedWorker(config);
    const calls: { client: string; id: string }[] = [];
    for (const client of Object.keys(CLIENT_SHARD))
      for (let i = 0; i < 4; i++)
        for (const queue of ['fast', 'sandbox'] as const)
          calls.push({
            client,
            id: await enqueue(sides, client, queue, 300, `${client}${queue}${i}`),
          });
    for (const { client, id } of calls) expect(await ended(sides, client, id)).toBe('ok');
    // Three shards, each with calls enough to fill every slot: never more than the worker's.
    expect(mostAtOnce.fast).toBe(2);
    expect(mostAtOnce.sandbox).toBe(3);
  });

  it("starts a quiet shard's call within a round of a flooded shard's calls", async () => {
    reset();
    const config = shardedConfig({ concurrency: 2 });
    const sides = shardSides(config);
    await startShardedWorker(config);
    for (let i = 0; i < 12; i++) await enqueue(sides, 'ann', 'fast', 400, `ann${i}`);
    // ann's calls hold both slots, the rest of them queued behind.
    while (starts.length < 2) await new Promise((r) => setTimeout(r, 10));
    const ben = await enqueue(sides, 'ben', 'fast', 10, 'ben');
    expect(await ended(sides, 'ben', ben)).toBe('ok');
    // ben's call takes the next slot freed (or the one after, had a completion just fetched):
    // not the 13th start, after ann's backlog.
    console.warn(
      `sharded fairness: ben's call on s1 was start #${starts.indexOf('ben') + 1} of ${starts.length}, ann's 12 queued on s0`,
    );
    expect(starts.indexOf('ben')).toBeGreaterThanOrEqual(0);
    expect(starts.indexOf('ben')).toBeLessThanOrEqual(4);
  });

  it('goes on serving the other shards while one is killed, and its queued calls run once it is back', async () => {
    reset();
    const config = shardedConfig({ concurrency: 2 });
    const sides = shardSides(config);
    const w = await startShardedWorker(config);
    // cat's calls on s2: two running (both slots), two queued, when s2 is killed.
    const catCalls = [];
    for (let i = 0; i < 4; i++) catCalls.push(await enqueue(sides, 'cat', 'fast', 1000, `cat${i}`));
    while (starts.length < 2) await new Promise((r) => setTimeout(r, 10));
    const { port } = servers.s2;
    servers.s2.child.kill('SIGKILL');
    await servers.s2.stop();
    // The others' calls go on, though cat's two running calls end with their shard gone.
    for (const client of ['ann', 'ben'])
      for (let i = 0; i < 3; i++) {
        const id = await enqueue(sides, client, 'fast', 10, `${client}${i}`);
        expect(await ended(sides, client, id, 10_000)).toBe('ok');
      }
    servers.s2 = await startServer('s2', port);
    // Queued before the kill, kept by the AOF: they run now (the running two were lost with
    // their ends; the stalled check hands them out again after the lock lapses).
    for (const id of catCalls.slice(2)) expect(await ended(sides, 'cat', id)).toBe('ok');
    const id = await enqueue(sides, 'cat', 'fast', 10, 'cat-after');
    expect(await ended(sides, 'cat', id)).toBe('ok');
    await w.close();
    worker = undefined;
  });

  it('starts without a shard that is down, naming it, serves it once it answers, and closes', async () => {
    reset();
    const config = shardedConfig({ concurrency: 2 });
    const sides = shardSides(config);
    const { port } = servers.s1;
    await servers.s1.stop();
    const w = createWorker({
      config,
      registry: createToolRegistry([hold]),
      logger: createLogger('test', { level: 'silent' }),
      services: {} as ToolServices,
    });
    worker = w;
    const metricsPort = await w.serveMetrics(0, '127.0.0.1');
    const started = Date.now();
    await w.start();
    expect(Date.now() - started).toBeLessThan(20_000);
    const health = (await (await fetch(`http://127.0.0.1:${metricsPort}/healthz`)).json()) as {
      shards: Record<string, boolean>;
    };
    expect(health.shards).toEqual({ s0: true, s1: false, s2: true });
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^toolgate_worker_shard_up\{shard="s1"[^}]*\} 0$/m);
    const ann = await enqueue(sides, 'ann', 'fast', 10, 'ann');
    expect(await ended(sides, 'ann', ann)).toBe('ok');
    servers.s1 = await startServer('s1', port);
    const ben = await enqueue(sides, 'ben', 'fast', 10, 'ben');
    expect(await ended(sides, 'ben', ben)).toBe('ok');
    // Down again: named down, and close() does not wait for it.
    await servers.s1.stop();
    for (;;) {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      if (/^toolgate_worker_shard_up\{shard="s1"[^}]*\} 0$/m.test(text)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const down = (await (await fetch(`http://127.0.0.1:${metricsPort}/healthz`)).json()) as {
      shards: Record<string, boolean>;
    };
    expect(down.shards).toEqual({ s0: true, s1: false, s2: true });
    const closing = Date.now();
    await w.close();
    worker = undefined;
    expect(Date.now() - closing).toBeLessThan(15_000);
    servers.s1 = await startServer('s1', port);
  });
});
