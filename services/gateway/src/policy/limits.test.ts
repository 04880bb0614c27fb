import { randomUUID } from 'node:crypto';
import { Keys, createRedis } from '@toolgate/calls';
import { ToolScope } from '@toolgate/registry';
import type { RedisClient } from '@toolgate/calls';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Client } from '../clients.js';
import { ApiError } from '../errors.js';
import { CallLimits, Prepaid, sliceSize } from './limits.js';

let redis: RedisClient;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
});
afterAll(() => redis.disconnect());

const LOOP = { maxCalls: 1_000_000, windowSeconds: 60 };
const client = (perMinute: number): Client => ({
  id: `c-${randomUUID().slice(0, 8)}`,
  admin: false,
  scope: new ToolScope(['*']),
  rateLimitPerMinute: perMinute,
  limits: { queued: 64, sandboxInFlight: 4, pendingApprovals: 16, sessions: 4 },
  perUser: {},
  isolation: 'client',
});
async function allowed(limits: CallLimits, c: Client): Promise<boolean> {
  try {
    await limits.consume(c, 1);
    return true;
  } catch (err) {
    if (err instanceof ApiError && err.code === 'rate_limited') return false;
    throw err;
  }
}

describe('rate limit slices', () => {
  it('are 1% of the per-minute rate, one call below 200 per minute, at most 100', () => {
    expect(sliceSize(3)).toBe(1);
    expect(sliceSize(199)).toBe(1);
    expect(sliceSize(600)).toBe(6);
    expect(sliceSize(100_000_000)).toBe(100);
  });

  it('take one Redis reservation per slice, shared by concurrent calls', async () => {
    const prefix = `lim-${randomUUID()}`;
    const limits = new CallLimits(redis, new Keys(prefix), LOOP);
    const c = client(1000); // slices of 10
    const results = await Promise.all(Array.from({ length: 50 }, () => allowed(limits, c)));
    expect(results.every(Boolean)).toBe(true);
    // 50 calls took exactly five slices from Redis, not one slice each.
    expect(await redis.get(`${prefix}:rate:1000:${c.id}`)).toBe('50');
  });

  it('never let two gateways together pass the budget, and waste at most a slice each', async () => {
    const prefix = `lim-${randomUUID()}`;
    const a = new CallLimits(redis, new Keys(prefix), LOOP);
    const b = new CallLimits(redis, new Keys(prefix), LOOP);
    const c = client(1000);
    let passed = 0;
    for (let i = 0; i < 1200; i++) if (await allowed(i % 3 === 0 ? a : b, c)) passed++;
    expect(passed).toBeLessThanOrEqual(1000);
    expect(passed).toBeGreaterThanOrEqual(1000 - 2 * sliceSize(1000));
    // Over the limit, both refuse with the 429 a client sees.
    await expect(a.consume(c, 1)).rejects.toMatchObject({ code: 'rate_limited' });
    await expect(b.consume(c, 1)).rejects.toMatchObject({ code: 'rate_limited' });
  });

  it('count a small budget exactly', async () => {
    const limits = new CallLimits(redis, new Keys(`lim-${randomUUID()}`), LOOP);
    const c = client(5);
    const results: boolean[] = [];
    for (let i = 0; i < 7; i++) results.push(await allowed(limits, c));
    expect(results).toEqual([true, true, true, true, true, false, false]);
  });
});

describe('prepaid calls', () => {
  it('a call the request paid at the door is not charged again; the loop guard still counts it', async () => {
    const prefix = `lim-${randomUUID()}`;
    const limits = new CallLimits(redis, new Keys(prefix), { maxCalls: 2, windowSeconds: 60 });
    const c = client(10);
    await limits.consume(c, 1); // the door
    const prepaid = new Prepaid();
    await limits.consume(c, 1, 'conv', prepaid); // the request's first call: covered
    await limits.consume(c, 1, 'conv', prepaid); // a second call in the same request: charged
    expect(await redis.get(`${prefix}:rate:10:${c.id}`)).toBe('2');
    await expect(limits.consume(c, 1, 'conv', new Prepaid())).rejects.toMatchObject({
      code: 'loop_limit',
    });
  });
});
