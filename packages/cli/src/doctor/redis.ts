/** Redis as toolgate needs it: a version it supports, no eviction, and data that survives restarts. */
import { createRedis, type RedisTarget } from '@toolgate/calls';
import { fail, ok, warn, type CheckResult } from './check.js';

/**
 * toolgate's own scripts use `BZPOPMIN`-era commands (Redis 6.0); BullMQ, which runs the queues,
 * needs 5.0 and asks for 6.2 (its blocking fetch with a fractional timeout). 6.2 is what the
 * tests and the images run.
 */
const MINIMUM = '6.0.0';
const RECOMMENDED = '6.2.0';

function older(version: string, than: string): boolean {
  const a = version.split('.').map(Number);
  const b = than.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) < (b[i] ?? 0);
  }
  return false;
}

function infoField(info: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}

/**
 * @param label what the lines are named: `redis`, or `redis <shard>` for each of `redis.shards`
 *   (docs/sharding.md), so a shard that does not answer is named.
 */
export async function checkRedis(
  target: RedisTarget,
  shown: string,
  label = 'redis',
): Promise<CheckResult[]> {
  const redis = createRedis(target, 'command', {
    lazyConnect: true,
    connectTimeout: 3000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  let lastError: Error | undefined;
  redis.on('error', (err: Error) => (lastError = err));
  try {
    try {
      await redis.connect();
    } catch (err) {
      return [
        fail(
          label,
          `does not answer at ${shown}: ${(lastError ?? (err as Error)).message}`,
          'start Redis (`toolgate up` starts one), or point REDIS_URL / redis.url at yours',
        ),
      ];
    }
    const info = await redis.info();
    const results: CheckResult[] = [];
    const version = infoField(info, 'redis_version') ?? '0.0.0';
    if (older(version, MINIMUM)) {
      results.push(
        fail(
          `${label} version`,
          `${version} at ${shown}; toolgate's queues need ${MINIMUM} or newer`,
          `upgrade Redis to ${RECOMMENDED} or newer`,
        ),
      );
    } else if (older(version, RECOMMENDED)) {
      results.push(
        warn(
          `${label} version`,
          `${version} at ${shown}; ${RECOMMENDED} or newer is what toolgate is tested on`,
          `upgrade Redis to ${RECOMMENDED} or newer`,
        ),
      );
    } else {
      results.push(ok(`${label} version`, `${version} at ${shown}`));
    }

    const policy = infoField(info, 'maxmemory_policy') ?? 'unknown';
    results.push(
      policy === 'noeviction'
        ? ok(`${label} eviction`, 'maxmemory-policy noeviction')
        : fail(
            `${label} eviction`,
            `maxmemory-policy is ${policy}: when memory runs out Redis deletes keys, and the queues lose calls and their state`,
            'set `maxmemory-policy noeviction` in redis.conf (now: redis-cli CONFIG SET maxmemory-policy noeviction)',
          ),
    );

    const aof = infoField(info, 'aof_enabled') === '1';
    let save: string | undefined;
    try {
      const answer = (await redis.config('GET', 'save')) as string[];
      save = answer[1];
    } catch {
      // CONFIG is disabled on some managed Redis services
    }
    if (aof || (save !== undefined && save.trim() !== '')) {
      results.push(
        ok(
          `${label} persistence`,
          [aof ? 'AOF on' : '', save ? `RDB save "${save}"` : ''].filter(Boolean).join(', '),
        ),
      );
    } else {
      results.push(
        warn(
          `${label} persistence`,
          save === undefined
            ? 'AOF is off and CONFIG GET is refused, so RDB snapshots cannot be checked'
            : 'none (no AOF, no RDB snapshots): a Redis restart loses queued calls, results, approvals and audit',
          'for anything but a throwaway stack, turn on `appendonly yes` (or RDB `save`) in redis.conf',
        ),
      );
    }
    return results;
  } finally {
    redis.disconnect();
  }
}
