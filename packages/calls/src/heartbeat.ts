import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';

/**
 * A worker counts as alive while its last beat is younger than this. Short, because the
 * reaper removes a dead worker's sandboxes once its beat is this old (docs/reliability.md).
 */
export const WORKER_ALIVE_MS = 8_000;
const BEAT_EVERY_MS = 2_000;

/**
 * Worker side: beats into a sorted set (member = worker id, score = time), and tells its owner
 * when another worker's beat stops (so its sandboxes can be reaped at once).
 */
export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  /** Workers already reported dead, so each is reported once. */
  private readonly reported = new Set<string>();

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    readonly workerId: string,
    private readonly onDead: (workerIds: string[]) => void = () => undefined,
    /** Warm sandboxes this worker holds, reported with each beat (the console's gauge). */
    private readonly warm?: () => number,
  ) {}

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => {
      this.beat().catch(() => {
        /* Redis down: the next beat retries */
      });
    }, BEAT_EVERY_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.redis
      .multi()
      .zrem(this.keys.workers, this.workerId)
      .hdel(this.keys.warm, this.workerId)
      .exec()
      .catch(() => undefined);
  }

  private async beat(): Promise<void> {
    const now = Date.now();
    const multi = this.redis.multi();
    if (this.warm) multi.hset(this.keys.warm, this.workerId, this.warm());
    const results = await multi
      .zadd(this.keys.workers, now, this.workerId)
      .zremrangebyscore(this.keys.workers, 0, now - 4 * WORKER_ALIVE_MS)
      .zrangebyscore(this.keys.workers, now - 4 * WORKER_ALIVE_MS, now - WORKER_ALIVE_MS)
      .exec();
    const stale = (results?.at(-1)?.[1] as string[] | undefined) ?? [];
    const fresh = stale.filter((id) => !this.reported.has(id));
    for (const id of fresh) this.reported.add(id);
    // Forget ids no longer listed (removed after 4× the window), so the set stays small.
    for (const id of this.reported) if (!stale.includes(id)) this.reported.delete(id);
    if (fresh.length > 0) this.onDead(fresh);
  }
}

/** Gateway side: how many workers beat recently. */
/** Warm sandboxes held by live workers (a dead worker's entry is left out, then pruned). */
export async function warmSandboxes(redis: RedisClient, keys: Keys): Promise<number> {
  const [alive, warm] = await Promise.all([
    redis.zrangebyscore(keys.workers, Date.now() - WORKER_ALIVE_MS, '+inf'),
    redis.hgetall(keys.warm),
  ]);
  const live = new Set(alive);
  const dead = Object.keys(warm).filter((id) => !live.has(id));
  if (dead.length > 0) await redis.hdel(keys.warm, ...dead);
  return Object.entries(warm).reduce((sum, [id, n]) => sum + (live.has(id) ? Number(n) : 0), 0);
}

export async function liveWorkers(redis: RedisClient, keys: Keys): Promise<number> {
  return redis.zcount(keys.workers, Date.now() - WORKER_ALIVE_MS, '+inf');
}

/** Whether the worker with this id beat recently (the sandbox reaper's question, from any host). */
export async function workerAlive(
  redis: RedisClient,
  keys: Keys,
  workerId: string,
): Promise<boolean> {
  const score = await redis.zscore(keys.workers, workerId);
  return score !== null && Number(score) > Date.now() - WORKER_ALIVE_MS;
}
