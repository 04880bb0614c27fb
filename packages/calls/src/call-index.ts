import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { Upkeep } from './upkeep.js';

/** Calls each client's index keeps, newest first; older ones drop out (their records stay). */
export const CALL_INDEX_SIZE = 1000;
/**
 * The index is trimmed and its expiry renewed at most once a second per process, or sooner
 * once CALL_INDEX_SIZE ids were added since: it holds at most twice CALL_INDEX_SIZE ids.
 */
const UPKEEP_EVERY_MS = 1000;

/**
 * Each client's recent calls, as a sorted set of ids scored by time (`GET /v1/calls`): written
 * with the records (the worker's batch, the gateway's answers, parked and cancelled calls) in
 * the same round trip, capped at CALL_INDEX_SIZE per client, expiring with the records.
 */
export class CallIndex {
  private readonly upkeep = new Upkeep(UPKEEP_EVERY_MS);

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
    multi.zadd(this.keys.callIndex(clientId), ...ids.flatMap((id) => [at, id]));
    this.upkeepTo(multi, clientId, ids.length);
  }

  /**
   * The trim and expiry due for `added` ids someone else put in the index: a queue's FINISH
   * script adds a call as it ends, and its record batch only keeps the index bounded.
   */
  upkeepTo(multi: ChainableCommander, clientId: string, added: number): void {
    const key = this.keys.callIndex(clientId);
    if (this.upkeep.due(key, added, CALL_INDEX_SIZE)) {
      multi.zremrangebyrank(key, 0, -(CALL_INDEX_SIZE + 1)).expire(key, this.ttlSeconds);
    }
  }

  /**
   * The clients' calls since `since` (epoch ms), newest first, at most `limit`, each with its
   * client: finished ones from the index and, read in the same transaction so no call falls
   * between the two, those in flight (both queues' admission sets).
   */
  async recent(
    clientIds: readonly string[],
    since: number,
    limit: number,
    inFlightLimit: number,
  ): Promise<{ finished: string[]; inFlight: string[]; owner: Map<string, string> }> {
    const multi = this.redis.multi();
    const read = (key: string, n: number) =>
      multi.zrevrangebyscore(key, '+inf', since, 'WITHSCORES', 'LIMIT', 0, n);
    for (const client of clientIds) {
      read(this.keys.callIndex(client), limit);
      read(this.keys.inFlight(client, 'fast'), inFlightLimit);
      read(this.keys.inFlight(client, 'sandbox'), inFlightLimit);
    }
    const replies = (await multi.exec()) ?? [];
    const owner = new Map<string, string>();
    const finished: [number, string][] = [];
    const inFlight: [number, string][] = [];
    replies.forEach(([err, reply], i) => {
      if (err) throw err;
      const flat = reply as string[];
      const rows = i % 3 === 0 ? finished : inFlight;
      for (let j = 0; j < flat.length; j += 2) {
        rows.push([Number(flat[j + 1]), flat[j]!]);
        owner.set(flat[j]!, clientIds[Math.floor(i / 3)]!);
      }
    });
    const newest = (rows: [number, string][], n: number) =>
      rows
        .sort((a, b) => b[0] - a[0])
        .slice(0, n)
        .map(([, id]) => id);
    return {
      finished: newest(finished, limit),
      inFlight: newest(inFlight, inFlightLimit),
      owner,
    };
  }
}
