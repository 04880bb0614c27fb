import { principal, type Keys } from '@toolgate/calls';
import type { RedisClient } from '@toolgate/calls';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Client } from '../clients.js';
import { ApiError } from '../errors.js';

/** Refusal windows remembered before past ones are swept (one per client, or per user). */
const REPORTED_MAX = 10_000;

/** A client's budget is taken from Redis in slices of 1% of its per-minute rate, at most this. */
const MAX_SLICE = 100;

/** How many calls one Redis round trip reserves for a client: 1 (exact) below 200 per minute. */
export function sliceSize(perMinute: number): number {
  return Math.max(1, Math.min(MAX_SLICE, Math.floor(perMinute / 100)));
}

/** This gateway's share of a client's budget in the current Redis window. */
interface Budget {
  /** Calls left in the slice. */
  left: number;
  /** When the window ends (epoch ms). */
  until: number;
  /** Less than a slice was free: count every call in Redis until the window ends. */
  exact: boolean;
}

/**
 * The call a request paid for at the door. Every authenticated request costs one call of its
 * client's rate before its body is read (`chargeRequests`); the first tool call the request
 * makes uses that one up, the others are charged as they come, so a request costs
 * max(1, its tool calls).
 */
export class Prepaid {
  private left = 1;

  /** How many of `calls` are still to be charged. */
  cover(calls: number): number {
    const covered = Math.min(this.left, calls);
    this.left -= covered;
    return calls - covered;
  }
}

/**
 * Per-client call rate (config `rateLimit.perMinute`) and the per-conversation loop guard
 * (`policy.loopGuard`), both counted in Redis so they hold across gateway processes.
 *
 * A busy client's rate is counted in slices: one Redis round trip reserves 1% of its
 * per-minute budget (at most 100 calls) for this gateway, and the calls after it are counted
 * here until the slice or its window runs out. Below 200 calls per minute a slice is one call,
 * so small budgets are exact; near the limit, when a whole slice is no longer free, calls are
 * counted one by one again. At most one slice per gateway goes unused in a window.
 */
export class CallLimits {
  private readonly perClient = new Map<number, RateLimiterRedis>();
  private readonly perUser = new Map<number, RateLimiterRedis>();
  private readonly loop: RateLimiterRedis;
  private readonly budgets = new Map<string, Budget>();
  private readonly reserving = new Map<string, Promise<void>>();
  /** Per client: until when its rate refusals are already on record (one audit entry per window). */
  private readonly reportedUntil = new Map<string, number>();

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly loopGuard: { maxCalls: number; windowSeconds: number },
    private readonly onLimited: (kind: 'rate' | 'loop', client: Client) => void = () => undefined,
  ) {
    this.loop = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: keys.loopGuardPrefix,
      points: loopGuard.maxCalls,
      duration: loopGuard.windowSeconds,
    });
  }

  /**
   * Counts `calls` calls for the client (and its conversation); throws 429 ApiErrors past the
   * limits. What `prepaid` covers is not charged to the rate again (the loop guard counts all).
   */
  async consume(
    client: Client,
    calls: number,
    conversationId?: string,
    prepaid?: Prepaid,
  ): Promise<void> {
    // What the door charged (Prepaid) it charged to the user's rate too: not again here.
    const charged = prepaid ? prepaid.cover(calls) : calls;
    try {
      if (charged > 0) await this.consumeRate(client, charged);
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
    await this.consumeUser(client, charged);
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

  /**
   * True for the first `rate_limited` refusal of a client in its window on this gateway: the
   * one worth an audit entry. A client hammering past its rate is then one entry a minute, not
   * one per request.
   */
  firstRefusal(client: Client, err: ApiError): boolean {
    if (err.code !== 'rate_limited') return true;
    const now = Date.now();
    // A user over its own rate is on record apart from its client and the client's other users.
    const byUser = (err.details as { scope?: string } | undefined)?.scope === 'user';
    const who = byUser ? principal(client.id, client.user) : client.id;
    if ((this.reportedUntil.get(who) ?? 0) > now) return false;
    const retryAfter = Number(err.headers['Retry-After'] ?? 1);
    // Users are unbounded: past windows are forgotten before the map grows large.
    if (this.reportedUntil.size >= REPORTED_MAX)
      for (const [key, until] of this.reportedUntil)
        if (until <= now) this.reportedUntil.delete(key);
    this.reportedUntil.set(who, now + retryAfter * 1000);
    return true;
  }

  /**
   * Counts `calls` against the rate of the user the client acts for (`limits.perUser.rateLimit`):
   * one by one in Redis, one round trip per call, only for clients that set it.
   */
  private async consumeUser(client: Client, calls: number): Promise<void> {
    const perMinute = client.perUser.rateLimitPerMinute;
    if (client.user === undefined || perMinute === undefined || calls <= 0) return;
    let limiter = this.perUser.get(perMinute);
    if (!limiter) {
      limiter = new RateLimiterRedis({
        storeClient: this.redis,
        keyPrefix: this.keys.userRatePrefix(perMinute),
        points: perMinute,
        duration: 60,
      });
      this.perUser.set(perMinute, limiter);
    }
    try {
      await limiter.consume(`${client.id}:${client.user}`, calls);
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      this.onLimited('rate', client);
      const retryAfter = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
      throw new ApiError(
        'rate_limited',
        `this user of client "${client.id}" is over its rate of ${perMinute} calls per minute; retry in ${retryAfter} s`,
        {
          headers: { 'Retry-After': String(retryAfter) },
          details: { limitPerMinute: perMinute, scope: 'user', retryAfterSeconds: retryAfter },
        },
      );
    }
  }

  /** Counts `calls` against the client's rate: from its slice, a new slice, or one by one. */
  private async consumeRate(client: Client, calls: number): Promise<void> {
    const limiter = this.limiter(client.rateLimitPerMinute);
    const size = sliceSize(client.rateLimitPerMinute);
    for (;;) {
      const budget = this.budgets.get(client.id);
      if (size <= calls || (budget?.exact && budget.until > Date.now())) {
        await limiter.consume(client.id, calls);
        return;
      }
      if (budget && budget.left >= calls && budget.until > Date.now()) {
        budget.left -= calls;
        return;
      }
      // Concurrent calls share one reservation instead of each reserving a slice.
      const reserving = this.reserving.get(client.id);
      if (!reserving) {
        const reservation = this.reserve(limiter, client.id, size).finally(() =>
          this.reserving.delete(client.id),
        );
        this.reserving.set(client.id, reservation);
        await reservation; // a Redis failure surfaces here (503)
        continue;
      }
      await reserving.catch(() => undefined); // then look at the new slice
    }
  }

  private async reserve(limiter: RateLimiterRedis, clientId: string, size: number): Promise<void> {
    try {
      const res = await limiter.consume(clientId, size);
      this.budgets.set(clientId, {
        left: size,
        until: Date.now() + res.msBeforeNext,
        exact: false,
      });
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      // Less than a slice is free in this window: give it back and count exactly from here on.
      await limiter.reward(clientId, size);
      this.budgets.set(clientId, { left: 0, until: Date.now() + err.msBeforeNext, exact: true });
    }
  }

  private limiter(perMinute: number): RateLimiterRedis {
    let limiter = this.perClient.get(perMinute);
    if (!limiter) {
      limiter = new RateLimiterRedis({
        storeClient: this.redis,
        keyPrefix: this.keys.ratePrefix(perMinute),
        points: perMinute,
        duration: 60,
      });
      this.perClient.set(perMinute, limiter);
    }
    return limiter;
  }
}
