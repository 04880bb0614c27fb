/**
 * Bounded storage (docs/redis-keys.md): each key family filled at its bound through the real
 * code paths stays under the memory figure the doc gives, and a result larger than
 * calls.maxResultBytes is stored once, cut and flagged, while the caller gets it whole.
 */
import { randomUUID } from 'node:crypto';
import {
  Approvals,
  CallEventWriter,
  CallStore,
  Keys,
  ResultCache,
  Stats,
  finishedRecord,
  type CallOutcome,
} from '@toolgate/calls';
import { Type, defineTool } from '@toolgate/registry';
import { MemoryStore } from '@toolgate/tools';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startRedisServer, type RedisServer } from './support/redis-server.js';
import { startStack, type Stack } from './support/stack.js';

/** Small bounds keep the fill fast; the figures scale with them as the doc says. */
const MAX_RESULT = 4096;
const N = 100;
/**
 * Redis's own cost per key, on top of the bytes of its name and value (dict entry, object
 * header, expiry entry, allocator rounding): the per-key overhead docs/redis-keys.md uses.
 */
const PER_KEY = 256;
/** jemalloc rounds an allocation up to its size class: at most 25% above the request. */
const ROUNDING = 1.25;
/** Costs that do not grow with the family: client query buffers, the memory scripts' cache. */
const FIXED = 128 * 1024;

let server: RedisServer | undefined;
let redis: Redis;

/**
 * A private redis-server, so used_memory moves only with what this file writes (other test
 * files share the run's Redis in parallel). Without the binary, the run's Redis and the sum of
 * MEMORY USAGE over this file's keys stand in.
 */
async function privateRedis(): Promise<Redis | undefined> {
  server = await startRedisServer().catch(() => undefined);
  if (!server) return undefined;
  const client = new Redis(server.port, '127.0.0.1');
  client.on('error', () => undefined);
  return client;
}

async function usedMemory(prefix: string): Promise<number> {
  if (server) {
    const info = await redis.info('memory');
    return Number(/used_memory:(\d+)/.exec(info)?.[1]);
  }
  let total = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) total += Number(await redis.memory('USAGE', key, 'SAMPLES', 0));
  } while (cursor !== '0');
  return total;
}

/** Growth of Redis memory while `fill` runs. */
async function growth(prefix: string, fill: () => Promise<void>): Promise<number> {
  const before = await usedMemory(prefix);
  await fill();
  return (await usedMemory(prefix)) - before;
}

/** The figure docs/redis-keys.md gives for `keys` keys of at most `bytesPerKey` each. */
const bound = (keys: number, bytesPerKey: number) =>
  Math.ceil(keys * (bytesPerKey * ROUNDING + PER_KEY));
const within = (used: number, figure: number) => expect(used).toBeLessThan(figure + FIXED);

beforeAll(async () => {
  redis = (await privateRedis()) ?? new Redis(inject('redisUrl'));
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

describe('each key family at its bound stays under the documented figure', () => {
  const keys = new Keys(`rb${randomUUID().slice(0, 8)}`);

  it('call records: results over calls.maxResultBytes are stored cut', async () => {
    const store = new CallStore(redis, keys, 3600, MAX_RESULT);
    const big: CallOutcome = {
      id: '',
      tool: 'run_python',
      status: 'ok',
      result: { exitCode: 0, stdout: 'o'.repeat(64 * 1024), stderr: 'e'.repeat(16 * 1024) },
      durationMs: 12.5,
      cached: false,
    };
    const used = await growth(keys.prefix, async () => {
      const multi = redis.multi();
      for (let i = 0; i < N; i++) {
        const id = randomUUID();
        const call = { id, tool: 'run_python', clientId: 'c'.repeat(64), acceptedAt: Date.now() };
        store.addTo(multi, finishedRecord(call, 'sandbox', { ...big, id }));
      }
      await multi.exec();
    });
    // The record around the result: ids, client, status, times, the truncation flag.
    within(used, bound(N, MAX_RESULT + 1024));
  });

  it('call event backlogs: a tool flooding output forwards at most calls.events.maxOutputBytes', async () => {
    const maxOutput = 4096;
    const used = await growth(keys.prefix, async () => {
      for (let i = 0; i < N; i++) {
        const id = randomUUID();
        const writer = new CallEventWriter(redis, keys, id, {
          maxOutputBytes: maxOutput,
          flushMs: 10,
        });
        writer.status('running');
        // 1 MB in 1 KB lines, and a progress report per line: one capped backlog per call.
        for (let line = 0; line < 1024; line++) {
          writer.events.output(line % 2 ? 'stderr' : 'stdout', `${'x'.repeat(1023)}\n`);
          writer.events.progress(line, 1024, `line ${line}`);
        }
        await writer.finishWrites({ id, tool: 't', status: 'ok', durationMs: 1, cached: false });
      }
    });
    // The forwarded output, the notice where it stopped, the status and progress events.
    within(used, bound(N, maxOutput + 2048));
  });

  it('idempotency keys at their longest', async () => {
    const store = new CallStore(redis, keys, 3600, MAX_RESULT);
    const used = await growth(keys.prefix, async () => {
      for (let i = 0; i < N; i++)
        await store.claimIdempotencyKey('c'.repeat(64), `${i}-`.padEnd(255, 'k'), randomUUID());
    });
    within(used, bound(N, 64 + 255 + 36 + 64));
  });

  it('the result cache: nothing over the cap, entries up to it', async () => {
    const cache = new ResultCache(redis, keys, MAX_RESULT);
    const tool = { name: 'http_get', cacheTtlSeconds: 600, cacheScope: 'global' as const };
    const used = await growth(keys.prefix, async () => {
      const multi = redis.multi();
      for (let i = 0; i < N; i++) {
        expect(cache.addTo(multi, tool, { i, big: true }, 'c', 'x'.repeat(64 * 1024))).toBe(false);
        expect(cache.addTo(multi, tool, { i }, 'c', 'x'.repeat(MAX_RESULT - 20))).toBe(true);
      }
      await multi.exec();
    });
    // Entry plus its member in the index (the key name, a score).
    within(used, bound(N, MAX_RESULT + 2 * 128));
    expect(await cache.size()).toBe(N);
  });

  it('stats: per-tool samples, recent and slowest calls are trimmed', async () => {
    const stats = new Stats(redis, keys);
    const tools = 5;
    const used = await growth(keys.prefix, async () => {
      for (let round = 0; round < 10; round++) {
        const multi = redis.multi();
        const calls = Array.from({ length: 500 }, (_, i) => ({
          clientId: 'c'.repeat(64),
          outcome: {
            id: randomUUID(),
            tool: `tool_${i % tools}`.padEnd(64, 'x'),
            status: 'error' as const,
            error: { code: 'e'.repeat(64), message: 'failed' },
            // As runTool reports them: ms with two decimals.
            durationMs: Math.round((1000 + Math.random() * 1000) * 100) / 100,
            cached: false,
          },
        }));
        stats.addBatch(multi, calls);
        await multi.exec();
      }
    });
    // Per tool: a counter hash and 1000 duration samples (≤ 24 bytes each in a list);
    // 100 recent and 50 slowest summaries (≤ 512 bytes each); the tool set.
    const perTool = 1000 * 24 + 512;
    within(used, bound(tools, perTool) + bound(150, 512) + bound(1, 1024));
  });

  it('memory: every client at maxEntries of maxTextLength with full tags', async () => {
    const limits = { maxEntries: 20, maxTextLength: 4000, maxTags: 10, maxTagLength: 40 };
    const memory = new MemoryStore(redis, { keys, ...limits });
    const clients = 3;
    const used = await growth(keys.prefix, async () => {
      for (let c = 0; c < clients; c++)
        for (let i = 0; i < limits.maxEntries; i++)
          await memory.save(
            `client-${c}`,
            `${i} `.padEnd(limits.maxTextLength, 'm'),
            Array.from({ length: limits.maxTags }, (_, t) =>
              `${t}`.padEnd(limits.maxTagLength, 't'),
            ),
          );
      await expect(memory.save('client-0', 'one more')).rejects.toMatchObject({
        code: 'memory_full',
      });
    });
    // An entry: text, tags (quoted, comma-separated), id, date, JSON punctuation.
    const entry = limits.maxTextLength + limits.maxTags * (limits.maxTagLength + 3) + 160;
    within(used, bound(clients * limits.maxEntries, entry));
  });

  it('pending approvals: the record holds the parked call, arguments included, its brief a preview', async () => {
    const store = new CallStore(redis, keys, 3600, MAX_RESULT);
    const approvals = new Approvals(redis, keys, store, 600);
    const argBytes = 2048;
    const used = await growth(keys.prefix, async () => {
      for (let i = 0; i < N; i++)
        await approvals.park(
          {
            id: randomUUID(),
            tool: 'wipe_disk',
            args: { disk: 'd'.repeat(argBytes) },
            clientId: 'c'.repeat(64),
            acceptedAt: Date.now(),
          },
          'fast',
          N,
        );
    });
    // The record (job, arguments, expiry), its brief (the arguments' preview, ≤ 4096
    // characters), and its members in the approvals set and the client's.
    within(used, bound(2 * N, argBytes + 1024));
  });
});

describe('a result over calls.maxResultBytes, through a gateway and a worker', () => {
  let stack: Stack;
  let shared: Redis;
  const size = 200_000;
  const bigOutput = defineTool({
    name: 'big_output',
    description: 'Prints n bytes (for storage bounds)',
    category: 'test',
    parameters: Type.Object({ n: Type.Integer({ minimum: 0 }) }),
    handler: ({ n }) => ({ exitCode: 0, stdout: 'x'.repeat(n), stderr: '' }),
  });
  const bigLookup = defineTool({
    name: 'big_lookup',
    description: 'A cacheable tool with a large answer',
    category: 'test',
    cacheTtlSeconds: 600,
    parameters: Type.Object({ n: Type.Integer({ minimum: 0 }) }),
    handler: ({ n }) => ({ body: 'y'.repeat(n), at: randomUUID() }),
  });

  beforeAll(async () => {
    stack = await startStack({
      tools: [bigOutput, bigLookup],
      config: { calls: { maxResultBytes: MAX_RESULT } },
    });
    shared = new Redis(inject('redisUrl'));
  });
  afterAll(async () => {
    await stack?.close();
    shared?.disconnect();
  });

  /** The parts of an execute answer or a GET /v1/calls/{id} these tests read. */
  interface CallBody {
    id: string;
    status: string;
    cached: boolean;
    result: { exitCode?: number; stdout?: string; body?: string; at?: string };
    resultTruncated?: { originalBytes: number; maxBytes: number };
  }
  const read = async (res: Response) => ({
    status: res.status,
    body: (await res.json()) as CallBody,
  });
  const execute = async (tool: string, n: number, query = '') =>
    read(await stack.call(`/tools/${tool}/execute${query}`, { json: { n } }));
  const getCall = async (id: string) => read(await stack.call(`/v1/calls/${id}`));

  it('answers whole, stores a flagged cut copy, and leaves no copy in BullMQ', async () => {
    const { status, body } = await execute('big_output', size);
    expect(status).toBe(200);
    expect(body.result.stdout).toHaveLength(size);
    expect(body.resultTruncated).toBeUndefined();

    // The record lands within the recorder's batch delay; until then the call reads as running.
    let stored = await getCall(body.id);
    for (let i = 0; i < 50 && stored.body.status === 'running'; i++) {
      await new Promise((r) => setTimeout(r, 20));
      stored = await getCall(body.id);
    }
    expect(stored.status).toBe(200);
    expect(stored.body.status).toBe('ok');
    expect(stored.body.resultTruncated).toEqual({
      originalBytes: expect.any(Number),
      maxBytes: MAX_RESULT,
    });
    expect(stored.body.resultTruncated?.originalBytes).toBeGreaterThan(size);
    expect(stored.body.result.exitCode).toBe(0);
    expect(stored.body.result.stdout).toMatch(/^x+…\[truncated\]$/);
    const record = await shared.get(`${stack.config.redis.prefix}:call:${body.id}`);
    expect(Buffer.byteLength(record!)).toBeLessThan(MAX_RESULT + 1024);

    // The queue keeps a short stub of the ended call, no copy of its output (its BullMQ job
    // is gone).
    const keys = new Keys(stack.config.redis.prefix);
    const stub = await shared.get(keys.ended(body.id));
    expect(stub).toMatch(/^\{"ended":true/);
    expect(await shared.exists(`${keys.queuePrefix}:fast:${body.id}`)).toBe(0);
    expect(stub).not.toContain('xxxxxxxx');
    expect(Buffer.byteLength(stub!)).toBeLessThan(1024);
  });

  it('a completed job whose record is not written yet reads as running, never an error', async () => {
    const { body } = await execute('big_output', 10);
    const recordKey = `${stack.config.redis.prefix}:call:${body.id}`;
    for (let i = 0; i < 50 && !(await shared.exists(recordKey)); i++)
      await new Promise((r) => setTimeout(r, 20));
    // As if the worker's batched write were still on its way.
    await shared.del(recordKey);
    const gap = await getCall(body.id);
    expect(gap.status).toBe(200);
    expect(gap.body).toMatchObject({ id: body.id, status: 'running' });
  });

  it('?wait=false: GET /v1/calls/{id} follows the call to its cut, flagged copy', async () => {
    const accepted = await execute('big_output', size, '?wait=false');
    expect(accepted.status).toBe(202);
    let stored = await getCall(accepted.body.id);
    for (let i = 0; i < 100 && ['queued', 'running'].includes(stored.body.status); i++) {
      await new Promise((r) => setTimeout(r, 20));
      stored = await getCall(accepted.body.id);
    }
    expect(stored.body.status).toBe('ok');
    expect(stored.body.resultTruncated?.maxBytes).toBe(MAX_RESULT);
  });

  it('results over the cap are not cached; a hit never answers with a cut copy', async () => {
    const first = await execute('big_lookup', size);
    const second = await execute('big_lookup', size);
    expect(second.body).toMatchObject({ status: 'ok', cached: false });
    expect(second.body.result.body).toHaveLength(size);
    expect(second.body.result.at).not.toBe(first.body.result.at);
    const small = await execute('big_lookup', 10);
    const again = await execute('big_lookup', 10);
    expect(again.body).toMatchObject({ cached: true, result: small.body.result });
  });

  it('every key under the prefix belongs to a family in docs/redis-keys.md', async () => {
    // Touch the rate limit and the loop guard as well.
    await stack.call('/tools/big_output/execute', {
      json: { n: 1 },
      headers: { 'x-conversation-id': 'conv-1', 'idempotency-key': 'idem-1' },
    });
    const prefix = stack.config.redis.prefix;
    const families = [
      /^call:[^:]+$/,
      /^brief:[^:]+$/,
      /^events:[^:]+$/,
      /^calls:[^:]+$/,
      /^series:\d+(:[^:]+)?$/,
      /^warm$/,
      /^cancelled:[^:]+$/,
      /^idem:[^:]+:.+$/,
      /^workers$/,
      /^audit:[^:]+$/,
      /^audit-clients$/,
      /^authfail:.+$/,
      /^approvals(:[^:]+)?$/,
      /^cache:[^:]+:[0-9a-f]{64}$/,
      /^cache-index$/,
      /^stats:(tools|recent|slowest|cache)$/,
      /^stats:(tool|durations):[^:]+$/,
      /^stats:client:[^:]+:(tools|recent|slowest|cache)$/,
      /^stats:client:[^:]+:(tool|durations):[^:]+$/,
      /^inflight:[^:]+:(fast|sandbox)$/,
      /^running:[^:]+:sandbox$/,
      /^held:[^:]+$/,
      /^workspace-resets$/,
      /^rate:\d+:[^:]+$/,
      /^loop:[^:]+:.+$/,
      /^memory:\{[^}]+\}(:v)?$/,
      // BullMQ's queues: its own keys per queue, and a job hash (and lock) per call.
      /^(fast|sandbox|sessions-[^:]+):(wait|prioritized|active|delayed|completed|failed|paused|events|meta|marker|stalled|stalled-check|id|pc|limiter|[0-9a-f-]{36}(:lock|:logs)?)$/,
      /^(ended|removed|queue-of):[0-9a-f-]{36}$/,
      /^session:[^:]+$/,
      /^sessions:(client|host):[^:]+$/,
      /^session-hosts$/,
    ];
    const found = await shared.keys(`${prefix}:*`);
    expect(found.length).toBeGreaterThan(5);
    const strays = found
      .map((k) => k.slice(prefix.length + 1))
      .filter((k) => !families.some((f) => f.test(k)));
    expect(strays).toEqual([]);
    expect(found.some((k) => k.startsWith(`${prefix}:rate:`))).toBe(true);
    expect(found.some((k) => k.startsWith(`${prefix}:loop:`))).toBe(true);
  });
});

describe('when Redis is full (maxmemory with noeviction, as docs/redis-keys.md advises)', () => {
  let stack: Stack;
  beforeAll(async () => {
    // Needs the private instance: filling the run's shared Redis would fail other files.
    if (!server) throw new Error('this test needs redis-server on PATH');
    const port = (redis.options as { port: number }).port;
    stack = await startStack({
      config: {
        redis: { url: `redis://127.0.0.1:${port}`, prefix: `full${randomUUID().slice(0, 6)}` },
      },
    });
  });
  afterAll(async () => {
    await redis.config('SET', 'maxmemory', '0');
    await stack?.close();
  });

  it('a call is refused with 503 unavailable and Retry-After, not a 500', async () => {
    const ok = await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } });
    expect(ok.status).toBe(200);
    await redis.config('SET', 'maxmemory-policy', 'noeviction');
    await redis.config('SET', 'maxmemory', '1');
    const full = await stack.call('/tools/calculator/execute', { json: { expression: '2+2' } });
    expect(full.status).toBe(503);
    expect(full.headers.get('retry-after')).toBeTruthy();
    expect(((await full.json()) as { error: { code: string } }).error.code).toBe('unavailable');
  });
});
