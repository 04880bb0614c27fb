import { createHash } from 'node:crypto';
import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import { stringify } from 'safe-stable-stringify';
import type { Keys } from './keys.js';

/**
 * SHA-256 (hex) of a value's canonical JSON (object keys sorted), so the same arguments in any
 * key order give the same digest: cache keys and idempotency fingerprints.
 */
export function canonicalDigest(value: unknown): string {
  return createHash('sha256')
    .update(stringify(value) ?? '')
    .digest('hex');
}

/** What decides whether and how a tool's results are cached (a subset of a registry Tool). */
export interface Cacheable {
  name: string;
  cacheTtlSeconds: number;
  cacheScope: 'global' | 'client';
}

/**
 * Results of cacheable tools in Redis, per-tool TTL. Key = tool + canonical arguments
 * (+ client for tools that touch client data). An index sorted by expiry gives the live key
 * count and the number of entries that expired (evictions). Results over `maxResultBytes` of
 * JSON are not cached: a hit must answer with the whole result, never a cut copy.
 */
export class ResultCache {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    /** calls.maxResultBytes: the largest entry kept. */
    readonly maxResultBytes: number,
  ) {}

  key(tool: Cacheable, args: unknown, clientId: string): string {
    return this.keys.cache(
      tool.name,
      canonicalDigest({ args, ...(tool.cacheScope === 'client' ? { client: clientId } : {}) }),
    );
  }

  async get(
    tool: Cacheable,
    args: unknown,
    clientId: string,
  ): Promise<{ result: unknown } | undefined> {
    if (tool.cacheTtlSeconds <= 0) return undefined;
    const text = await this.redis.get(this.key(tool, args, clientId));
    return text === null ? undefined : (JSON.parse(text) as { result: unknown });
  }

  /** Adds the entry's write to a MULTI/pipeline; false when the result is too large to cache. */
  addTo(
    multi: ChainableCommander,
    tool: Cacheable,
    args: unknown,
    clientId: string,
    result: unknown,
  ): boolean {
    if (tool.cacheTtlSeconds <= 0) return false;
    const entry = JSON.stringify({ result });
    if (Buffer.byteLength(entry) > this.maxResultBytes) return false;
    const key = this.key(tool, args, clientId);
    multi
      .set(key, entry, 'EX', tool.cacheTtlSeconds)
      .zadd(this.keys.cacheIndex, Date.now() + tool.cacheTtlSeconds * 1000, key);
    return true;
  }

  /** Drops expired entries from the index; returns how many expired since the last sweep. */
  async sweep(): Promise<number> {
    const now = Date.now();
    const [[, removed] = [null, 0]] =
      (await this.redis.multi().zremrangebyscore(this.keys.cacheIndex, '-inf', now).exec()) ?? [];
    return Number(removed ?? 0);
  }

  async size(): Promise<number> {
    return this.redis.zcount(this.keys.cacheIndex, Date.now(), '+inf');
  }
}
