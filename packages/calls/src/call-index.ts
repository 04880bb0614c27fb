import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';

/** Calls each client's index keeps, newest first; older ones drop out (their records stay). */
export const CALL_INDEX_SIZE = 1000;

/**
 * Each client's recent calls, as a sorted set of ids scored by time (`GET /v1/calls`): written
 * with the records (the worker's batch, the gateway's answers, parked and cancelled calls) in
 * the same round trip, capped at CALL_INDEX_SIZE per client, expiring with the records.
 */
export class CallIndex {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly ttlSeconds: number,
  ) {}

  addTo(
    multi: ChainableCommander,
    clientId: string,
    ids: readonly string[],
    at = Date.now(),
  ): void {
    if (ids.length === 0) return;
    const key = this.keys.callIndex(clientId);
    multi
      .zadd(key, ...ids.flatMap((id) => [at, id]))
      .zremrangebyrank(key, 0, -(CALL_INDEX_SIZE + 1))
      .expire(key, this.ttlSeconds);
  }

  /** Ids of the clients' calls since `since` (epoch ms), newest first, at most `limit`. */
  async recent(clientIds: readonly string[], since: number, limit: number): Promise<string[]> {
    const multi = this.redis.multi();
    for (const client of clientIds) {
      multi.zrevrangebyscore(
        this.keys.callIndex(client),
        '+inf',
        since,
        'WITHSCORES',
        'LIMIT',
        0,
        limit,
      );
    }
    const rows: [number, string][] = [];
    for (const [err, reply] of (await multi.exec()) ?? []) {
      if (err) throw err;
      const flat = reply as string[];
      for (let i = 0; i < flat.length; i += 2) rows.push([Number(flat[i + 1]), flat[i]!]);
    }
    return rows
      .sort((a, b) => b[0] - a[0])
      .slice(0, limit)
      .map(([, id]) => id);
  }
}
