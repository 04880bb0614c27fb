import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import type { QueueKind } from './types.js';

/** The largest priority a queue score holds (2^21 - 1: × 2^32 stays exact in a double). */
export const MAX_PRIORITY = 2 ** 21 - 1;

/**
 * Admission for fair sharing of workers (docs/scheduling.md). Each client has a sorted set per
 * queue of the calls it has in flight (queued or running), scored by accept time. The queue's
 * ADMIT script (CallQueue, before the BullMQ add) refuses a call while the client already has `limit` in flight, and
 * gives an admitted one a priority equal to the client's count in that queue, so the queue
 * serves every client's first call before anyone's second: round-robin by each client's
 * backlog position.
 *
 * A call's end removes its entry. An entry older than `staleAfterMs` is dropped as a call
 * whose worker vanished, so a lost completion costs a client one slot for that long, never for
 * ever.
 */
export class Admission {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    readonly staleAfterMs: number,
  ) {}

  /**
   * Forgets a call inside a caller's pipeline or transaction (no extra round trip); a user's
   * call leaves the user's set too (the user stays in the client's users set until the next
   * upkeep, ≤ 1 s: it counts one user too many in the fair order meanwhile).
   */
  releaseIn(
    pipeline: ChainableCommander,
    clientId: string,
    kind: QueueKind,
    id: string,
    user?: string,
  ): void {
    pipeline.zrem(this.keys.inFlight(clientId, kind), id);
    if (user !== undefined) pipeline.zrem(this.keys.userInFlight(clientId, kind, user), id);
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

/** A backlog position as a priority: 1 for a client's only call, capped at MAX_PRIORITY. */
export function fairPriority(position: number): number {
  return Math.min(Math.max(1, position), MAX_PRIORITY);
}
