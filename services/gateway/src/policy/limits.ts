import type { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Client } from '../clients.js';
import { ApiError } from '../errors.js';

/**
 * Per-client call rate (config `rateLimit.perMinute`) and the per-conversation loop guard
 * (`policy.loopGuard`), both counted in Redis so they hold across gateway processes.
 */
export class CallLimits {
  private readonly perClient = new Map<number, RateLimiterRedis>();
  private readonly loop: RateLimiterRedis;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly loopGuard: { maxCalls: number; windowSeconds: number },
    private readonly onLimited: (kind: 'rate' | 'loop', client: Client) => void = () => undefined,
  ) {
    this.loop = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: `${prefix}:loop`,
      points: loopGuard.maxCalls,
      duration: loopGuard.windowSeconds,
    });
  }

  /** Counts `calls` calls for the client (and its conversation); throws 429 ApiErrors past the limits. */
  async consume(client: Client, calls: number, conversationId?: string): Promise<void> {
    try {
      await this.limiter(client.rateLimitPerMinute).consume(client.id, calls);
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      this.onLimited('rate', client);
      const retryAfter = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
      throw new ApiError(
        'rate_limited',
        `client "${client.id}" is over its rate of ${client.rateLimitPerMinute} calls per minute; retry in ${retryAfter} s`,
        {
          headers: { 'Retry-After': String(retryAfter) },
          details: { limitPerMinute: client.rateLimitPerMinute, retryAfterSeconds: retryAfter },
        },
      );
    }
    if (!conversationId) return;
    try {
      await this.loop.consume(`${client.id}:${conversationId}`, calls);
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      this.onLimited('loop', client);
      const retryAfter = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
      const { maxCalls, windowSeconds } = this.loopGuard;
      throw new ApiError(
        'loop_limit',
        `This conversation has made more than ${maxCalls} tool calls in ${windowSeconds} seconds, which looks like a loop. ` +
          'Stop calling tools now and answer the user with what you have, or ask them how to proceed.',
        {
          headers: { 'Retry-After': String(retryAfter) },
          details: { maxCalls, windowSeconds, conversationId },
        },
      );
    }
  }

  private limiter(perMinute: number): RateLimiterRedis {
    let limiter = this.perClient.get(perMinute);
    if (!limiter) {
      limiter = new RateLimiterRedis({
        storeClient: this.redis,
        keyPrefix: `${this.prefix}:rate:${perMinute}`,
        points: perMinute,
        duration: 60,
      });
      this.perClient.set(perMinute, limiter);
    }
    return limiter;
  }
}
