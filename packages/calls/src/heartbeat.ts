import type { Redis } from 'ioredis';
import type { Keys } from './keys.js';

/** A worker counts as alive while its last beat is younger than this. */
export const WORKER_ALIVE_MS = 15_000;
const BEAT_EVERY_MS = 5_000;

/** Worker side: beats into a sorted set (member = worker id, score = time). */
export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    readonly workerId: string,
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
    await this.redis.zrem(this.keys.workers, this.workerId).catch(() => undefined);
  }

  private async beat(): Promise<void> {
    const now = Date.now();
    await this.redis
      .multi()
      .zadd(this.keys.workers, now, this.workerId)
      .zremrangebyscore(this.keys.workers, 0, now - 4 * WORKER_ALIVE_MS)
      .exec();
  }
}

/** Gateway side: how many workers beat recently. */
export async function liveWorkers(redis: Redis, keys: Keys): Promise<number> {
  return redis.zcount(keys.workers, Date.now() - WORKER_ALIVE_MS, '+inf');
}
