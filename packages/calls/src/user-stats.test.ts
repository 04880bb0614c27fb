import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Keys } from './keys.js';
import { createRedis, type RedisClient } from './redis.js';
import { Stats, USER_STATS_MAX, type StatCall } from './stats.js';

let redis: RedisClient;
let keys: Keys;
let stats: Stats;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
  keys = new Keys(`t${randomUUID().slice(0, 8)}`);
  stats = new Stats(redis, keys);
});
afterAll(() => redis.disconnect());

const call = (user: string, status: 'ok' | 'error' = 'ok', durationMs = 10): StatCall => ({
  clientId: 'c',
  user,
  outcome: { id: randomUUID(), tool: 'calculator', status, durationMs, cached: false },
});

async function add(calls: StatCall[]): Promise<void> {
  const multi = redis.multi();
  stats.addBatch(multi, calls);
  await multi.exec();
}

describe('per-user stats', () => {
  it('counts each user of a client, shows a user only its own row and calls', async () => {
    await add([call('ann'), call('ann', 'error', 30), call('ben')]);
    const all = await stats.report({ client: 'c' });
    expect(all.users).toEqual([
      { user: 'ben', calls: 1, errors: 0, avgMs: 10 },
      { user: 'ann', calls: 2, errors: 1, avgMs: 20 },
    ]);
    const ann = await stats.report({ client: 'c', user: 'ann' });
    expect(ann.users).toEqual([{ user: 'ann', calls: 2, errors: 1, avgMs: 20 }]);
    expect(new Set(ann.recent.map((c) => c.user))).toEqual(new Set(['ann']));
    expect((await stats.report({})).users).toBeUndefined();
  });

  it(`keeps at most ${USER_STATS_MAX} users per client, dropping the longest idle`, async () => {
    const many = Array.from({ length: USER_STATS_MAX + 5 }, (_, i) => call(`u${i}`));
    await add(many);
    const { counts, seen } = keys.userStats('c');
    expect(await redis.zcard(seen)).toBe(USER_STATS_MAX);
    // Three fields per user at most (no errors here: two), never more users than the cap.
    expect(await redis.hlen(counts)).toBeLessThanOrEqual(3 * USER_STATS_MAX);
    const users = new Set(
      (await redis.hkeys(counts)).filter((f) => f.startsWith('calls:')).map((f) => f.slice(6)),
    );
    expect(users.size).toBe(USER_STATS_MAX);
    expect(users.has(`u${USER_STATS_MAX + 4}`)).toBe(true);
  });
});
