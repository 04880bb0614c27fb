/**
 * `redis.durability`: waiting until writes the master acknowledged are on replicas (Redis
 * `WAIT`), so that a failover cannot take them back. docs/redis-ha.md says what it guarantees.
 */
import type { Keys } from './keys.js';
import { createRedis, type RedisClient, type RedisTarget } from './redis.js';

/** Cluster redirections and refusals while a slot moves between masters. */
const SLOT_MOVING = /^(ASK|MOVED|TRYAGAIN|CLUSTERDOWN)\b/;
/** How long a confirmation waits out a slot migration (ioredis's own TRYAGAIN retries: ~6 s). */
const SLOT_MOVE_WAIT_MS = 6000;
const SLOT_MOVE_RETRY_MS = 100;

/** How a confirmation went: `replicated` false when WAIT's timeout passed first. */
export interface Replication {
  /** Replicas that acknowledged. */
  acked: number;
  replicated: boolean;
  /** The round trip, from sending the marker to WAIT's answer. */
  ms: number;
}

/**
 * Confirms that everything this process had written before calling `confirm()` reached
 * `replicas` replicas.
 *
 * WAIT only waits for the writes of the connection it is sent on, and it blocks that
 * connection while it waits. So it runs on a connection of its own, after a write of its own
 * (a timestamp in `Keys.replicated`): the replication stream is in the master's order, so a
 * replica that has that write has every write the master acknowledged before it — the job a
 * gateway just queued, or the claim a worker just made, whichever connection carried them. Concurrent callers share a round trip: one is in flight at a time, and the
 * callers that arrive meanwhile all join the next one.
 */
export class ReplicaWait {
  private readonly redis: RedisClient | undefined;
  private inFlight: Promise<Replication> | undefined;
  private next: Promise<Replication> | undefined;

  constructor(
    target: RedisTarget,
    private readonly keys: Keys,
    readonly durability: { replicas: number; timeoutMs: number },
  ) {
    // A command connection: during an outage a confirmation fails at once (the call is then
    // answered 503 or not run), it does not wait in an offline queue.
    this.redis = durability.replicas > 0 ? createRedis(target, 'command') : undefined;
  }

  /** Whether confirmations are asked for at all (`redis.durability.replicas` > 0). */
  get enabled(): boolean {
    return this.redis !== undefined;
  }

  /**
   * Resolves once the writes made before this call are on `replicas` replicas, or WAIT's
   * timeout passed (`replicated: false`: the writes are on the master only). Rejects when
   * Redis cannot be asked (down, failing over): then nothing is known about those writes.
   */
  confirm(): Promise<Replication> {
    if (!this.redis) return Promise.resolve({ acked: 0, replicated: true, ms: 0 });
    this.next ??= (async () => {
      await this.inFlight?.catch(() => undefined);
      // From here on a new caller may have written after this round's marker: it waits for the
      // round after.
      this.next = undefined;
      const round = this.round(this.redis!);
      this.inFlight = round;
      return round;
    })();
    return this.next;
  }

  private async round(redis: RedisClient): Promise<Replication> {
    const started = performance.now();
    const { replicas, timeoutMs } = this.durability;
    for (;;) {
      const results = await redis
        .pipeline()
        .set(this.keys.replicated, Date.now())
        .wait(replicas, timeoutMs)
        .exec();
      const failed = results?.find(([err]) => err)?.[0];
      if (!failed) {
        const acked = Number(results?.[1]?.[1] ?? 0);
        return { acked, replicated: acked >= replicas, ms: performance.now() - started };
      }
      // A Redis Cluster moving toolgate's slot to another master: the marker is redirected
      // (ASK, then MOVED once the slot is there) while WAIT runs where the pipeline was sent,
      // so the pair fails. Again in a moment, until the slot has settled (the calls being
      // confirmed waited for that too: their multi-key writes get TRYAGAIN meanwhile).
      if (!SLOT_MOVING.test(failed.message) || performance.now() - started > SLOT_MOVE_WAIT_MS)
        throw failed;
      await new Promise((r) => setTimeout(r, SLOT_MOVE_RETRY_MS));
    }
  }

  close(): void {
    this.redis?.disconnect();
  }
}
