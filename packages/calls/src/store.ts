import type { Redis } from 'ioredis';
import type { Keys } from './keys.js';
import type { CallRecord } from './types.js';

/** Call records in Redis, each a JSON string that expires after the configured TTL. */
export class CallStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    readonly ttlSeconds: number,
  ) {}

  async put(record: CallRecord): Promise<void> {
    await this.redis.set(this.keys.call(record.id), JSON.stringify(record), 'EX', this.ttlSeconds);
  }

  async get(id: string): Promise<CallRecord | undefined> {
    const text = await this.redis.get(this.keys.call(id));
    return text ? (JSON.parse(text) as CallRecord) : undefined;
  }

  /**
   * Claims an idempotency key for a call. Returns the id of the call that already holds the
   * key, or undefined when this call now holds it.
   */
  async claimIdempotencyKey(
    clientId: string,
    key: string,
    callId: string,
  ): Promise<string | undefined> {
    const redisKey = this.keys.idempotency(clientId, key);
    const set = await this.redis.set(redisKey, callId, 'EX', this.ttlSeconds, 'NX');
    if (set === 'OK') return undefined;
    const holder = await this.redis.get(redisKey);
    return holder ?? undefined;
  }

  /** Frees a key this call claimed but never used (the call was not accepted). */
  async releaseIdempotencyKey(clientId: string, key: string, callId: string): Promise<void> {
    const redisKey = this.keys.idempotency(clientId, key);
    if ((await this.redis.get(redisKey)) === callId) await this.redis.del(redisKey);
  }
}
