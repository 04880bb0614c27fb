/**
 * Listings cost bounded bytes per listed call whatever the results' sizes (docs/http-api.md,
 * "Listing bounds"): a client's index full of results at `calls.maxResultBytes` is listed from
 * the calls' briefs, and Redis sends the gateway a few hundred bytes per call, not the results.
 * Parked calls count against `limits.pendingApprovals`, and the approvals list reads briefs.
 */
import { randomUUID } from 'node:crypto';
import {
  AuditLog,
  CallIndex,
  CallStore,
  Keys,
  finishedRecord,
  type CallRecord,
} from '@toolgate/calls';
import type { ApprovalEvent, CallList, PendingApproval } from '@toolgate/gateway';
import { Type, defineTool } from '@toolgate/registry';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

/** The default `calls.maxResultBytes`: every stored result below is cut to it. */
const MAX_RESULT = 262_144;
/** Calls in alice's index, each holding a result at the cap (≈ 30 MiB of records). */
const N = 120;
/**
 * What one listing may cost in Redis replies: its briefs (≤ 1 KiB per finished call, the
 * bound docs/http-api.md gives) for every call it reads, plus the index read and the
 * stack's background traffic (worker polls, heartbeats) during the request.
 */
const BRIEF_BYTES = 1024;
const BACKGROUND = 64 * 1024;

const CAROL = 'carol-key-0123456789abcdef';
const DAVE = 'dave-key-0123456789abcdef0';
const ERIN = 'erin-key-0123456789abcdef0';
const FRANK = 'frank-key-0123456789abcdef';

let server: RedisServer;
let redis: Redis;
let stack: Stack;
let keys: Keys;

const bigResult = defineTool({
  name: 'big_result',
  description: 'Answers n bytes (a result at the storage cap)',
  category: 'test',
  parameters: Type.Object({ n: Type.Integer({ minimum: 0 }) }),
  handler: ({ n }) => ({ body: 'x'.repeat(n) }),
});

const slowPad = defineTool({
  name: 'slow_pad',
  description: 'Holds its (large) arguments in flight for ms milliseconds',
  category: 'test',
  parameters: Type.Object({ pad: Type.String(), ms: Type.Integer({ minimum: 0 }) }),
  timeoutMs: 30_000,
  handler: async ({ ms }) => {
    await new Promise((r) => setTimeout(r, ms));
    return 'done';
  },
});

/**
 * A private redis-server, so the bytes it sends move only with this file's stack (other test
 * files share the run's Redis in parallel).
 */
beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis(server.port, '127.0.0.1');
  const prefix = `lb${randomUUID().slice(0, 8)}`;
  keys = new Keys(prefix);
  stack = await startStack({
    tools: [...testTools, bigResult, slowPad],
    config: {
      redis: { url: server.url, prefix },
      clients: [
        {
          id: 'alice',
          key: KEYS.alice,
          tools: ['*'],
          rateLimit: { perMinute: 10_000 },
          limits: { pendingApprovals: 3 },
        },
        { id: 'bob', key: KEYS.bob, tools: ['*'], rateLimit: { perMinute: 10_000 } },
        { id: 'carol', key: CAROL, tools: ['*'], rateLimit: { perMinute: 15 } },
        { id: 'dave', key: DAVE, tools: ['*'], rateLimit: { perMinute: 10_000 } },
        { id: 'erin', key: ERIN, tools: ['*'], rateLimit: { perMinute: 10_000 } },
        { id: 'frank', key: FRANK, tools: ['*'], rateLimit: { perMinute: 10_000 } },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true, rateLimit: { perMinute: 10_000 } },
      ],
    },
  });
}, 60_000);
afterAll(async () => {
  await stack?.close();
  redis?.disconnect();
  await server?.stop();
});

/** Bytes Redis has sent to all its clients so far. */
async function sentBytes(): Promise<number> {
  return Number(/total_net_output_bytes:(\d+)/.exec(await redis.info('stats'))?.[1]);
}

/** A listing, and the bytes Redis sent while the gateway answered it. */
async function measured<T>(path: string, key: string = KEYS.alice) {
  const before = await sentBytes();
  const res = await stack.call(path, { key });
  const text = await res.text();
  const redisBytes = (await sentBytes()) - before;
  return { status: res.status, body: JSON.parse(text) as T, redisBytes, replyBytes: text.length };
}

const execute = (tool: string, args: unknown, key: string = KEYS.alice) =>
  stack.call(`/tools/${tool}/execute`, { json: args, key });

describe('a call listing over results at the cap', () => {
  beforeAll(async () => {
    let next = 0;
    const runOne = async (): Promise<void> => {
      while (next < N) {
        next++;
        const res = await execute('big_result', { n: MAX_RESULT + 40_000 });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
    };
    await Promise.all(Array.from({ length: 6 }, runOne));
    // The worker's record batch lands a few ms after the last answer.
    for (let i = 0; i < 100; i++) {
      const { body } = await measured<CallList>(`/v1/calls?limit=200`);
      if (body.calls.filter((c) => c.status === 'ok').length >= N) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const stored = await redis.strlen(
      keys.call((await redis.zrange(keys.callIndex('alice'), 0, 0))[0]!),
    );
    expect(stored).toBeGreaterThan(MAX_RESULT);
  }, 120_000);

  it('a filtered listing with limit=1 reads briefs, not the results', async () => {
    const one = await measured<CallList>('/v1/calls?status=ok&limit=1');
    expect(one.status).toBe(200);
    expect(one.body.calls).toHaveLength(1);
    expect(one.body.calls[0]).toMatchObject({ tool: 'big_result', status: 'ok', cached: false });
    // The old listing fetched every full record (N × 256 KiB ≈ 30 MiB) for this answer.
    expect(one.redisBytes).toBeLessThan(N * BRIEF_BYTES + BACKGROUND);
  });

  it('a filter that matches nothing scans the whole index at ≤ 1 KiB per call', async () => {
    const none = await measured<CallList>('/v1/calls?tool=calculator&limit=200');
    expect(none.body.calls).toEqual([]);
    expect(none.redisBytes).toBeLessThan(N * BRIEF_BYTES + BACKGROUND);
  });

  it('the whole list, and an admin’s over every client, cost ≤ 1 KiB per listed call', async () => {
    const all = await measured<CallList>('/v1/calls?limit=200');
    expect(all.body.calls.length).toBeGreaterThanOrEqual(N);
    expect(all.redisBytes).toBeLessThan(all.body.calls.length * BRIEF_BYTES + BACKGROUND);
    expect(all.replyBytes).toBeLessThan(all.body.calls.length * 512);
    const admin = await measured<CallList>('/v1/calls?limit=200', KEYS.admin);
    expect(admin.body.calls.length).toBeGreaterThanOrEqual(N);
    expect(admin.redisBytes).toBeLessThan(admin.body.calls.length * BRIEF_BYTES + BACKGROUND);
  });

  it('records written before briefs existed: listed, read whole at most 1 MiB a listing', async () => {
    // The previous format: the record alone, indexed, no brief. Eight at the cap (2 MiB)
    // and one small one.
    const write = async (result: string) => {
      const id = randomUUID();
      const record: CallRecord = {
        id,
        tool: 'big_result',
        clientId: 'bob',
        status: 'ok',
        queue: 'fast',
        createdAt: Date.now(),
        outcome: { id, tool: 'big_result', status: 'ok', result, durationMs: 7, cached: false },
      };
      await redis
        .multi()
        .set(keys.call(id), JSON.stringify(record), 'EX', 3600)
        .zadd(keys.callIndex('bob'), Date.now(), id)
        .exec();
      return id;
    };
    const small = await write('tiny');
    const big: string[] = [];
    for (let i = 0; i < 8; i++) big.push(await write('z'.repeat(MAX_RESULT)));

    const first = await measured<CallList>('/v1/calls?limit=200', KEYS.bob);
    // The legacy budget (1 MiB) is spent on the newest big records; the rest wait.
    expect(first.redisBytes).toBeLessThan(1024 * 1024 + 9 * BRIEF_BYTES + BACKGROUND);
    expect(first.body.calls.map((c) => c.id)).toContain(big.at(-1));
    // Each listing makes the briefs it can afford; a few listings list them all.
    let listed: string[] = [];
    for (let i = 0; i < 4 && listed.length < 9; i++) {
      listed = (await measured<CallList>('/v1/calls?limit=200', KEYS.bob)).body.calls.map(
        (c) => c.id,
      );
    }
    expect(listed.sort()).toEqual([small, ...big].sort());
    expect(await redis.exists(keys.callBrief(small))).toBe(1);
    // Now it reads briefs only.
    const after = await measured<CallList>('/v1/calls?limit=200', KEYS.bob);
    expect(after.redisBytes).toBeLessThan(9 * BRIEF_BYTES + BACKGROUND);
    expect(after.body.calls.find((c) => c.id === small)).toMatchObject({
      status: 'ok',
      durationMs: 7,
    });
  });
});

describe('calls in flight', () => {
  it('are listed from their queue without reading their arguments', async () => {
    const pad = 'p'.repeat(500_000);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await stack.call('/tools/slow_pad/execute?wait=false', {
        key: DAVE,
        json: { pad, ms: 8000 },
      });
      expect(res.status).toBe(202);
      ids.push(((await res.json()) as { id: string }).id);
    }
    // All running (their jobs, arguments included, already went to the worker).
    let listed: CallList = { calls: [] };
    for (let i = 0; i < 100; i++) {
      listed = (await measured<CallList>('/v1/calls?limit=10', DAVE)).body;
      if (listed.calls.filter((c) => c.status === 'running').length === 3) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const m = await measured<CallList>('/v1/calls?limit=10', DAVE);
    expect(m.body.calls.map((c) => c.id).sort()).toEqual([...ids].sort());
    for (const c of m.body.calls) expect(c).toMatchObject({ tool: 'slow_pad', status: 'running' });
    // Reading each job would have sent its 500 KB of arguments.
    expect(m.redisBytes).toBeLessThan(3 * BRIEF_BYTES + BACKGROUND);
  });
});

describe('what a listing costs the client', () => {
  it('each 100 calls scanned past the first 100 cost one of its rate', async () => {
    // 1000 finished calls, written as the worker writes them (record, brief, index).
    const store = new CallStore(redis, keys, 3600, MAX_RESULT);
    const index = new CallIndex(redis, keys, 3600);
    for (let i = 0; i < 1000; i += 100) {
      const multi = redis.multi();
      const ids = Array.from({ length: 100 }, () => randomUUID());
      for (const id of ids) {
        const outcome = {
          id,
          tool: 'calculator',
          status: 'ok' as const,
          result: 2,
          durationMs: 1,
          cached: false,
        };
        store.addTo(
          multi,
          finishedRecord(
            { id, tool: 'calculator', clientId: 'carol', acceptedAt: Date.now() },
            'fast',
            outcome,
          ),
        );
      }
      index.addTo(multi, 'carol', ids);
      await multi.exec();
    }
    // A filter that matches nothing reads all 1000: 1 at the door + 9.
    const first = await stack.call('/v1/calls?tool=wipe_disk&limit=200', { key: CAROL });
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ calls: [] });
    // 10 of 15 spent: the next full scan runs out of rate on its way.
    const second = await stack.call('/v1/calls?tool=wipe_disk&limit=200', { key: CAROL });
    expect(second.status).toBe(429);
    expect(await second.json()).toMatchObject({ error: { code: 'rate_limited' } });
  });
});

describe('calls parked for approval', () => {
  it('count against limits.pendingApprovals: 429 beyond it, for that client only', async () => {
    const big = 'a'.repeat(400_000);
    const parked: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await execute('wipe_disk', { disk: `${big}${i}` });
      expect(res.status).toBe(202);
      parked.push(((await res.json()) as { id: string }).id);
    }
    const over = await execute('wipe_disk', { disk: 'sdz' });
    expect(over.status).toBe(429);
    expect(over.headers.get('retry-after')).toBe('30');
    expect(await over.json()).toMatchObject({
      error: { code: 'too_many_pending_approvals', details: { pending: 3, limit: 3 } },
    });
    // Another client parks as before.
    expect((await execute('wipe_disk', { disk: 'sdb' }, KEYS.bob)).status).toBe(202);

    // The approvals list reads briefs: each parked call's arguments as a preview.
    const list = await measured<PendingApproval[]>('/v1/approvals', KEYS.admin);
    expect(list.body.filter((p) => p.client === 'alice')).toHaveLength(3);
    // Four briefs of ≤ 16 KiB, where the records hold 400 KB of arguments each.
    expect(list.redisBytes).toBeLessThan(4 * 16 * 1024 + BACKGROUND);
    for (const p of list.body) expect(JSON.stringify(p.arguments).length).toBeLessThan(4200);

    // The console's feed counts them per client, against each limit.
    const snapshot = await firstEvent();
    expect(snapshot).toMatchObject({
      type: 'snapshot',
      total: 4,
      byClient: {
        alice: { pending: 3, limit: 3 },
        bob: { pending: 1, limit: 16 },
        ops: { pending: 0, limit: 16 },
      },
    });

    // A decision gives the place back.
    const reject = await stack.call(`/v1/approvals/${parked[0]}/reject`, {
      key: KEYS.admin,
      json: {},
    });
    expect(reject.status).toBe(200);
    expect((await execute('wipe_disk', { disk: 'sdy' })).status).toBe(202);
    expect((await execute('wipe_disk', { disk: 'sdx' })).status).toBe(429);
    // So does a cancel by the client itself.
    const cancel = await stack.call(`/v1/calls/${parked[1]}/cancel`, { method: 'POST' });
    expect(cancel.status).toBe(200);
    expect((await execute('wipe_disk', { disk: 'sdw' })).status).toBe(202);
  });
});

/** Finished calls of `clientId`, written as the worker writes them (record, brief, index). */
async function writeFinished(clientId: string, tool: string, count: number, at = Date.now()) {
  const store = new CallStore(redis, keys, 3600, MAX_RESULT);
  const index = new CallIndex(redis, keys, 3600);
  for (let i = 0; i < count; i += 100) {
    const multi = redis.multi();
    const ids = Array.from({ length: Math.min(100, count - i) }, () => randomUUID());
    for (const id of ids) {
      const outcome = { id, tool, status: 'ok' as const, result: 2, durationMs: 1, cached: false };
      store.addTo(multi, finishedRecord({ id, tool, clientId, acceptedAt: at }, 'fast', outcome));
    }
    index.addTo(multi, clientId, ids, at);
    await multi.exec();
  }
}

describe('a listing stops at its budget and says so', () => {
  it('1000 calls scanned: an admin’s filtered listing answers "partial": true', async () => {
    // frank's calls are older than the 1000 newest of all clients (erin's): out of reach.
    await writeFinished('frank', 'lookup', 3, Date.now() - 60_000);
    await writeFinished('erin', 'calculator', 1000);
    const all = await measured<CallList>('/v1/calls?tool=lookup&limit=10', KEYS.admin);
    expect(all.status).toBe(200);
    expect(all.body).toEqual({ calls: [], partial: true });
    expect(all.redisBytes).toBeLessThan(1000 * BRIEF_BYTES + BACKGROUND);
    // Narrowed to the one client, the scan reaches them and is whole.
    const frank = await measured<CallList>(
      '/v1/calls?tool=lookup&limit=10&client=frank',
      KEYS.admin,
    );
    expect(frank.body.calls).toHaveLength(3);
    expect(frank.body.partial).toBeUndefined();
    // A listing that read every call it could says nothing more.
    const whole = await measured<CallList>('/v1/calls?tool=lookup&limit=10', FRANK);
    expect(whole.body).toEqual({ calls: frank.body.calls });
  });

  it('1 MiB of briefs read: "partial": true, Redis sent ≤ 1 MiB + one chunk', async () => {
    // 800 parked calls whose briefs carry ~9 KB argument previews (3-byte characters), newer
    // than erin's 1000 finished ones: a status=ok listing meets the parked briefs first.
    const store = new CallStore(redis, keys, 3600, MAX_RESULT);
    const index = new CallIndex(redis, keys, 3600);
    const wide = '語'.repeat(500);
    const args = Object.fromEntries(['a', 'b', 'c', 'd', 'e', 'f'].map((k) => [k, wide]));
    const parked: string[] = [];
    for (let i = 0; i < 800; i += 100) {
      const multi = redis.multi();
      const ids = Array.from({ length: 100 }, () => randomUUID());
      for (const id of ids) {
        const acceptedAt = Date.now();
        store.addTo(multi, {
          id,
          tool: 'wipe_disk',
          clientId: 'erin',
          status: 'pending_approval',
          queue: 'fast',
          createdAt: acceptedAt,
          expiresAt: acceptedAt + 3_600_000,
          job: { id, tool: 'wipe_disk', clientId: 'erin', args, acceptedAt },
        });
      }
      index.addTo(multi, 'erin', ids);
      await multi.exec();
      parked.push(...ids);
    }
    const briefBytes = await redis.strlen(keys.callBrief(parked[0]!));
    expect(briefBytes).toBeGreaterThan(8 * 1024);
    const budget = 1024 * 1024 + 100 * 16 * 1024; // LIST_BYTES + one chunk of BRIEF_MAX_BYTES
    expect(800 * briefBytes).toBeGreaterThan(2 * budget);

    const listed = await measured<CallList>('/v1/calls?status=ok&limit=5', ERIN);
    expect(listed.status).toBe(200);
    expect(listed.body).toEqual({ calls: [], partial: true });
    expect(listed.redisBytes).toBeLessThan(budget + BACKGROUND);
  });

  it('the audit view reads at most 8 MiB, and says it stopped (Toolgate-Partial: true)', async () => {
    // 3500 entries at audit.maxEntryBytes (4096 bytes; their arguments in 3-byte characters).
    const audit = new AuditLog(redis, keys, stack.config.audit);
    const args = { text: '語'.repeat(400), more: '語'.repeat(400), rest: '語'.repeat(400) };
    for (let i = 0; i < 3500; i += 500) {
      const multi = redis.multi();
      for (let j = 0; j < 500; j++) {
        audit.addTo(
          multi,
          audit.entry({ event: 'call', client: 'erin', tool: 'echo', status: 'ok', args }),
        );
      }
      await multi.exec();
    }
    const [[, fields] = ['', []]] = await redis.xrevrange(keys.audit('erin'), '+', '-', 'COUNT', 1);
    const entryBytes = Buffer.byteLength(fields[1] ?? '');
    expect(entryBytes).toBeGreaterThan(3500);
    expect(entryBytes).toBeLessThanOrEqual(stack.config.audit.maxEntryBytes);
    // MAX_SCANNED_BYTES, one more page of 256 KiB, and Redis's framing of each entry read
    // (its stream id, the field name: ~50 bytes).
    const budget = 8 * 1024 * 1024 + 256 * 1024 + 2500 * 64;
    expect(3500 * entryBytes).toBeGreaterThan(budget + 2 * 1024 * 1024);

    const before = await sentBytes();
    const res = await stack.call('/v1/audit?client=erin&tool=nothing&limit=10', {
      key: KEYS.admin,
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual([]);
    expect(res.headers.get('toolgate-partial')).toBe('true');
    expect((await sentBytes()) - before).toBeLessThan(budget + BACKGROUND);

    // A query that found what it asked for is whole.
    const found = await stack.call('/v1/audit?client=erin&limit=10', { key: KEYS.admin });
    expect(await found.json()).toHaveLength(10);
    expect(found.headers.get('toolgate-partial')).toBeNull();
  });
});

/** The approvals feed's first event (its snapshot). */
async function firstEvent(): Promise<ApprovalEvent> {
  const stop = new AbortController();
  const res = await fetch(`${stack.url}/v1/approvals/events`, {
    headers: { authorization: `Bearer ${KEYS.admin}` },
    signal: stop.signal,
  });
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      const end = buffer.indexOf('\n\n');
      const data = end >= 0 ? /^data: (.*)$/m.exec(buffer.slice(0, end))?.[1] : undefined;
      if (data) return JSON.parse(data) as ApprovalEvent;
    }
  } finally {
    stop.abort();
  }
  throw new Error('the feed ended before its snapshot');
}
