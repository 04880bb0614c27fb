import { randomUUID } from 'node:crypto';
import type { RedisClient } from './redis.js';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Admission, MAX_PRIORITY, fairPriority } from './admission.js';
import { Keys } from './keys.js';
import { RunLeases } from './leases.js';
import { createRedis } from './redis.js';

let redis: RedisClient;
let keys: Keys;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
  keys = new Keys(`t${randomUUID().slice(0, 8)}`);
});
afterAll(() => redis.disconnect());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('Admission', () => {
  it('counts a client across both queues, refuses at its limit, and admits again after a release', async () => {
    const admission = new Admission(redis, keys, 60_000);
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
    const admission = new Admission(redis, keys, 60_000);
    expect(await admission.admit('c', 'fast', 'c1', 1)).toMatchObject({ admitted: true });
    expect(await admission.admit('c', 'fast', 'c2', 1)).toMatchObject({ admitted: false });
    expect(await admission.count('c', 'fast', 'c3')).toBe(2);
    expect(await admission.inFlight('c')).toBe(2);
  });

  it('drops entries older than the stale horizon (a call whose worker vanished)', async () => {
    const admission = new Admission(redis, keys, 300);
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
    const admission = new Admission(redis, keys, 300);
    await admission.admit('g', 'fast', 'lost', 10);
    await sleep(400);
    // Far from the limit, the stale entry would still have put the call second in line.
    expect(await admission.admit('g', 'fast', 'g2', 10)).toEqual({ admitted: true, priority: 1 });
    expect(await admission.inFlight('g')).toBe(1);
  });

  it('leaves no key behind for an idle client', async () => {
    const admission = new Admission(redis, keys, 200);
    await admission.admit('e', 'fast', 'e1', 2);
    expect(await redis.pttl(keys.inFlight('e', 'fast'))).toBeGreaterThan(0);
    await sleep(300);
    expect(await redis.exists(keys.inFlight('e', 'fast'))).toBe(0);
  });

  it('caps priorities at BullMQ’s maximum', () => {
    expect(fairPriority(0)).toBe(1);
    expect(fairPriority(17)).toBe(17);
    expect(fairPriority(10 ** 9)).toBe(MAX_PRIORITY);
  });
});

describe('RunLeases', () => {
  it('grants a client at most `cap` leases, counts refusals in the job, and frees a slot on release or expiry', async () => {
    const leases = new RunLeases(redis, keys);
    const job = keys.bullJob('sandbox', 'r3');
    await redis.hset(job, 'name', 'test'); // the job hash BullMQ would have made
    expect(await leases.acquire('r', 'sandbox', 'r1', 2, 60_000)).toEqual({
      granted: true,
      deferrals: 0,
    });
    expect(await leases.acquire('r', 'sandbox', 'r2', 2, 300)).toEqual({
      granted: true,
      deferrals: 0,
    });
    expect(await leases.acquire('r', 'sandbox', 'r3', 2, 60_000)).toEqual({
      granted: false,
      deferrals: 1,
    });
    expect(await leases.acquire('r', 'sandbox', 'r3', 2, 60_000)).toEqual({
      granted: false,
      deferrals: 2,
    });
    // Re-taking a lease the call already holds (a retried job) is not a second slot.
    expect(await leases.acquire('r', 'sandbox', 'r1', 2, 60_000)).toMatchObject({ granted: true });
    // Another client has its own share.
    expect(await leases.acquire('s', 'sandbox', 's1', 2, 60_000)).toMatchObject({ granted: true });
    // r2's lease expires (its worker died): r3 runs, and knows it was put back twice.
    await sleep(400);
    expect(await leases.acquire('r', 'sandbox', 'r3', 2, 60_000)).toEqual({
      granted: true,
      deferrals: 2,
    });
    expect(await leases.running('r', 'sandbox')).toBe(2);
    const pipeline = redis.pipeline();
    leases.releaseIn(pipeline, 'r', 'sandbox', 'r1');
    await pipeline.exec();
    expect(await leases.running('r', 'sandbox')).toBe(1);
    expect(await leases.acquire('r', 'sandbox', 'r4', 2, 60_000)).toMatchObject({
      granted: true,
    });
  });
});
