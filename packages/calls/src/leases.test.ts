import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Keys } from './keys.js';
import { RunLeases } from './leases.js';
import { createRedis, type RedisClient } from './redis.js';

let redis: RedisClient;
let keys: Keys;
let leases: RunLeases;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
  keys = new Keys(`t${randomUUID().slice(0, 8)}`);
  leases = new RunLeases(redis, keys);
});
afterAll(() => redis.disconnect());

describe('RunLeases', () => {
  it('refuses a client at its cap, and counts a lapsed lease (a dead worker’s) for nothing', async () => {
    expect(await leases.acquire('a', 'sandbox', 'one', 2, 60_000)).toBe(true);
    expect(await leases.acquire('a', 'sandbox', 'lapses', 2, 300)).toBe(true);
    expect(await leases.acquire('a', 'sandbox', 'two', 2, 60_000)).toBe(false);
    await new Promise((r) => setTimeout(r, 350));
    // At the cap the lapsed lease is dropped: the call takes its place.
    expect(await leases.acquire('a', 'sandbox', 'two', 2, 60_000)).toBe(true);
    expect(await leases.acquire('a', 'sandbox', 'three', 2, 60_000)).toBe(false);
    // A call that holds a lease may take it again (its worker asked twice).
    expect(await leases.acquire('a', 'sandbox', 'one', 2, 60_000)).toBe(true);
    expect(await leases.running('a', 'sandbox')).toBe(2);
  });

  it('the key lasts as long as its longest lease, never shorter', async () => {
    const key = keys.running('b', 'sandbox');
    expect(await leases.acquire('b', 'sandbox', 'long', 4, 600_000)).toBe(true);
    expect(await leases.acquire('b', 'sandbox', 'short', 4, 5_000)).toBe(true);
    expect(await redis.pttl(key)).toBeGreaterThan(590_000);
    expect(await leases.acquire('b', 'sandbox', 'longer', 4, 900_000)).toBe(true);
    expect(await redis.pttl(key)).toBeGreaterThan(890_000);
  });
});
