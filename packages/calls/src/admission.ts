import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { LuaScript } from './script.js';
import type { QueueKind } from './types.js';

/** BullMQ's largest job priority (2^21 - 1); lower numbers are served first. */
export const MAX_PRIORITY = 2 ** 21 - 1;

/**
 * Refuses when a client's calls in flight (both queues) reach the limit, else records the call.
 * Returns {1, the client's calls in this queue} or {0, its calls in flight}. Stale entries
 * (their worker vanished) are pruned where they would count: on the way to a refusal, and in
 * this queue when its oldest entry is stale (its count is the call's fair priority). An
 * admitted call costs two ZCARDs, a ZRANGE, a ZADD and a PEXPIRE. Time is Redis's, so
 * gateways with skewed clocks agree.
 *   KEYS: this queue's set, the other queue's set
 *   ARGV: call id, limit (0 = never refuse), stale horizon ms
 */
const ADMIT = new LuaScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local horizon = tonumber(ARGV[3])
local limit = tonumber(ARGV[2])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
if oldest and tonumber(oldest) < now - horizon then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
end
local here = redis.call('ZCARD', KEYS[1])
local there = redis.call('ZCARD', KEYS[2])
if limit > 0 and here + there >= limit then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - horizon)
  here = redis.call('ZCARD', KEYS[1])
  there = redis.call('ZCARD', KEYS[2])
  if here + there >= limit then return {0, here + there} end
end
here = here + redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], horizon)
return {1, here}
`);

export type AdmitResult =
  | {
      admitted: true;
      /** BullMQ priority: the client's place in its own backlog. */ priority: number;
    }
  | { admitted: false; inFlight: number };

/**
 * Gateway-side admission for fair sharing of workers (docs/scheduling.md). Each client has a
 * sorted set per queue of the calls it has in flight (queued or running), scored by accept
 * time. A call is refused while the client already has `limit` in flight; an admitted call
 * gets a BullMQ priority equal to the client's count in that queue, so the queue serves every
 * client's first call before anyone's second: round-robin by each client's backlog position.
 *
 * Workers remove the entry when a call ends. An entry older than `staleAfterMs` is dropped as
 * a call whose worker vanished, so a lost completion costs a client one slot for that long,
 * never for ever.
 */
export class Admission {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    readonly staleAfterMs: number,
  ) {}

  /** One round trip: admits the call (and records it) unless the client is at `limit`. */
  async admit(clientId: string, kind: QueueKind, id: string, limit: number): Promise<AdmitResult> {
    const [ok, n] = (await ADMIT.run(
      this.redis,
      [this.keys.inFlight(clientId, kind), this.keys.inFlight(clientId, other(kind))],
      [id, Math.max(1, limit), this.staleAfterMs],
    )) as [number, number];
    return ok === 1
      ? { admitted: true, priority: fairPriority(n) }
      : { admitted: false, inFlight: n };
  }

  /** Records a call that must not be refused (an approved call going to the queue). */
  async count(clientId: string, kind: QueueKind, id: string): Promise<number> {
    const [, n] = (await ADMIT.run(
      this.redis,
      [this.keys.inFlight(clientId, kind), this.keys.inFlight(clientId, other(kind))],
      [id, 0, this.staleAfterMs],
    )) as [number, number];
    return fairPriority(n);
  }

  /** Forgets a call (it ended, or was never enqueued). */
  async release(clientId: string, kind: QueueKind, id: string): Promise<void> {
    await this.redis.zrem(this.keys.inFlight(clientId, kind), id);
  }

  /** Forgets a call inside a caller's pipeline or transaction (no extra round trip). */
  releaseIn(pipeline: ChainableCommander, clientId: string, kind: QueueKind, id: string): void {
    pipeline.zrem(this.keys.inFlight(clientId, kind), id);
  }

  /** A client's calls in flight in both queues (the other queue's stale entries included until a refusal prunes them). */
  async inFlight(clientId: string): Promise<number> {
    const [a, b] = await Promise.all([
      this.redis.zcard(this.keys.inFlight(clientId, 'fast')),
      this.redis.zcard(this.keys.inFlight(clientId, 'sandbox')),
    ]);
    return a + b;
  }
}

function other(kind: QueueKind): QueueKind {
  return kind === 'fast' ? 'sandbox' : 'fast';
}

/** A backlog position as a BullMQ priority: 1 for a client's only call, capped at BullMQ's maximum. */
export function fairPriority(position: number): number {
  return Math.min(Math.max(1, position), MAX_PRIORITY);
}
