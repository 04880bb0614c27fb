import { randomUUID } from 'node:crypto';
import type { RedisClient } from './redis.js';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Admission, MAX_PRIORITY, fairPriority } from './admission.js';
import { CallQueue } from './call-queue.js';
import { Keys } from './keys.js';
import { RunLeases } from './leases.js';
import { createRedis } from './redis.js';

let redis: RedisClient;
let keys: Keys;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
  keys = new Keys(`t${randomUUID().slice(0, 8)}`);
});
/** Every queue a test opened, closed at the end. */
const opened: CallQueue[] = [];
afterAll(async () => {
  await Promise.all(opened.map((q) => q.close()));
  redis.disconnect();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Admission happens in the queue's ADMIT script before the add (CallQueue): a call admitted against `limit` (0:
 * never refused, an approved call), with the in-flight set's upkeep each time.
 */
function admitter(horizonMs: number) {
  const admission = new Admission(redis, keys, horizonMs);
  const lanes = {
    fast: new CallQueue(redis, keys, 'fast'),
    sandbox: new CallQueue(redis, keys, 'sandbox'),
  };
  opened.push(lanes.fast, lanes.sandbox);
  const job = (clientId: string, id: string) => ({
    id,
    tool: 'calculator',
    args: {},
    clientId,
    acceptedAt: Date.now(),
  });
  return {
    admit: (clientId: string, kind: 'fast' | 'sandbox', id: string, limit: number) =>
      lanes[kind].enqueue(job(clientId, id), Math.max(1, limit), horizonMs, true),
    count: async (clientId: string, kind: 'fast' | 'sandbox', id: string) => {
      const r = await lanes[kind].enqueue(job(clientId, id), 0, horizonMs, true);
      return r.admitted ? r.priority : -1;
    },
    release: async (clientId: string, kind: 'fast' | 'sandbox', id: string) => {
      const pipeline = redis.pipeline();
      admission.releaseIn(pipeline, clientId, kind, id);
      await pipeline.exec();
    },
    inFlight: (clientId: string) => admission.inFlight(clientId),
  };
}

describe('Admission', () => {
  it('counts a client across both queues, refuses at its limit, and admits again after a release', async () => {
    const admission = admitter(60_000);
    const a = [
      await admission.admit('a', 'sandbox', 'a1', 3),
      await admission.admit('a', 'sandbox', 'a2', 3),
      await admission.admit('a', 'fast', 'a3', 3),
    ];
    // Priorities are each call's place in its client's backlog in that queue.
    expect(a).toEqual([
      { admitted: true, priority: 1 },
      { admitted: true, priority: 2 },
      { admitted: true, priority: 1 },
    ]);
    expect(await admission.admit('a', 'sandbox', 'a4', 3)).toEqual({
      admitted: false,
      inFlight: 3,
      scope: 'client',
    });
    // Another client is not affected, and its first call comes first in the queue.
    expect(await admission.admit('b', 'sandbox', 'b1', 3)).toEqual({
      admitted: true,
      priority: 1,
    });
    await admission.release('a', 'sandbox', 'a1');
    expect(await admission.admit('a', 'sandbox', 'a4', 3)).toEqual({
      admitted: true,
      priority: 2,
    });
    expect(await admission.inFlight('a')).toBe(3);
  });

  it('counts an approved call without refusing it', async () => {
    const admission = admitter(60_000);
    expect(await admission.admit('c', 'fast', 'c1', 1)).toMatchObject({ admitted: true });
    expect(await admission.admit('c', 'fast', 'c2', 1)).toMatchObject({ admitted: false });
    expect(await admission.count('c', 'fast', 'c3')).toBe(2);
    expect(await admission.inFlight('c')).toBe(2);
  });

  it('drops entries older than the stale horizon (a call whose worker vanished)', async () => {
    const admission = admitter(300);
    expect(await admission.admit('d', 'sandbox', 'lost-1', 2)).toMatchObject({ admitted: true });
    expect(await admission.admit('d', 'fast', 'lost-2', 2)).toMatchObject({ admitted: true });
    expect(await admission.admit('d', 'sandbox', 'd3', 2)).toMatchObject({ admitted: false });
    await sleep(400);
    // Both lost calls are forgotten; the client has its whole share again.
    expect(await admission.admit('d', 'sandbox', 'd3', 2)).toEqual({
      admitted: true,
      priority: 1,
    });
    expect(await admission.inFlight('d')).toBe(1);
  });

  it('gives a call its fair place even when a stale entry sits in its queue under the limit', async () => {
    const admission = admitter(300);
    await admission.admit('g', 'fast', 'lost', 10);
    await sleep(400);
    // Far from the limit, the stale entry would still have put the call second in line.
    expect(await admission.admit('g', 'fast', 'g2', 10)).toEqual({ admitted: true, priority: 1 });
    expect(await admission.inFlight('g')).toBe(1);
  });

  it('leaves no key behind for an idle client', async () => {
    const admission = admitter(200);
    await admission.admit('e', 'fast', 'e1', 2);
    expect(await redis.pttl(keys.inFlight('e', 'fast'))).toBeGreaterThan(0);
    await sleep(300);
    expect(await redis.exists(keys.inFlight('e', 'fast'))).toBe(0);
  });

  it('caps priorities at the largest a queue score holds exactly', () => {
    expect(fairPriority(0)).toBe(1);
    expect(fairPriority(17)).toBe(17);
    expect(fairPriority(10 ** 9)).toBe(MAX_PRIORITY);
  });
});

describe('RunLeases', () => {
  it('grants a client at most `cap` leases, and frees a slot on release or expiry', async () => {
    const leases = new RunLeases(redis, keys);
    expect(await leases.acquire('r', 'sandbox', 'r1', 2, 60_000)).toBe(true);
    expect(await leases.acquire('r', 'sandbox', 'r2', 2, 300)).toBe(true);
    expect(await leases.acquire('r', 'sandbox', 'r3', 2, 60_000)).toBe(false);
    // Re-taking a lease the call already holds (a retried call) is not a second slot.
    expect(await leases.acquire('r', 'sandbox', 'r1', 2, 60_000)).toBe(true);
    // Another client has its own share.
    expect(await leases.acquire('s', 'sandbox', 's1', 2, 60_000)).toBe(true);
    // r2's lease expires (its worker died): r3 runs.
    await sleep(400);
    expect(await leases.acquire('r', 'sandbox', 'r3', 2, 60_000)).toBe(true);
    expect(await leases.running('r', 'sandbox')).toBe(2);
    const pipeline = redis.pipeline();
    leases.releaseIn(pipeline, 'r', 'sandbox', 'r1');
    await pipeline.exec();
    expect(await leases.running('r', 'sandbox')).toBe(1);
    expect(await leases.acquire('r', 'sandbox', 'r4', 2, 60_000)).toBe(true);
  });
});
