import { isIPv6 } from 'node:net';
import type { RedisClient } from '@toolgate/calls';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { ApiError } from '../errors.js';

/**
 * Requests with a missing or unknown key, counted per source address in Redis (shared by
 * every gateway): past `perMinute` the address gets 429 instead of 401 for the rest of the
 * window, and this gateway stops asking Redis (an in-memory block until the window ends), so
 * a flood of bad keys costs a hash and a map lookup per request. A valid key from the same
 * address is never counted or refused here.
 */
export class AuthFailures {
  private readonly limiter: RateLimiterRedis;

  constructor(
    private readonly redis: RedisClient,
    keyPrefix: string,
    private readonly perMinute: number,
    private readonly onLimited: () => void = () => undefined,
  ) {
    this.limiter = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix,
      points: perMinute,
      duration: 60,
      inMemoryBlockOnConsumed: perMinute + 1,
    });
  }

  /** Counts one failure for `address`; the error to answer: 401 `unauthorized`, or 429. */
  async fail(address: string, unauthorized: ApiError): Promise<ApiError> {
    // Redis down: the 401 still holds, uncounted (nothing behind it needs Redis either).
    if (this.redis.status !== 'ready') return unauthorized;
    try {
      await this.limiter.consume(bucket(address));
      return unauthorized;
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) return unauthorized;
      this.onLimited();
      const retryAfter = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
      return new ApiError(
        'rate_limited',
        `too many requests with a missing or unknown API key from this address; retry in ${retryAfter} s`,
        {
          headers: { 'Retry-After': String(retryAfter) },
          details: { limitPerMinute: this.perMinute, retryAfterSeconds: retryAfter },
        },
      );
    }
  }
}

/**
 * The counted unit: an IPv4 address, or an IPv6 /64 (one host usually holds a whole /64, so
 * counting single IPv6 addresses would let it rotate through 2^64 of them).
 */
export function bucket(address: string): string {
  if (address.startsWith('::ffff:') && address.includes('.')) return address.slice(7);
  if (!isIPv6(address)) return address;
  const [head = '', tail = ''] = address.split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = address.includes('::')
    ? [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right]
    : left;
  return `${groups
    .slice(0, 4)
    .map((g) => g.toLowerCase().replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}
