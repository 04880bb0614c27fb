import { Redis, type RedisOptions } from 'ioredis';

/**
 * Redis connections. `command` connections give up on a command after one failed reconnect
 * (the gateway answers 503 instead of hanging; commands sent while first connecting just
 * wait); `blocking` ones wait and reconnect forever (BullMQ workers and event readers).
 */
export function createRedis(
  url: string,
  kind: 'command' | 'blocking',
  options: RedisOptions = {},
): Redis {
  const common: RedisOptions = {
    lazyConnect: false,
    // Commands issued in the same tick go out in one write: fewer syscalls under load.
    enableAutoPipelining: false,
    retryStrategy: (times) => Math.min(times * 200, 2000),
    ...options,
  };
  const redis =
    kind === 'blocking'
      ? new Redis(url, { ...common, maxRetriesPerRequest: null, enableOfflineQueue: true })
      : new Redis(url, { ...common, maxRetriesPerRequest: 1, enableOfflineQueue: true });
  // Connection errors surface as failed commands (503s, /readyz); without a listener ioredis
  // would print every reconnect attempt.
  redis.on('error', () => undefined);
  redis.on('ready', () => everReady.add(redis));
  return redis;
}

const everReady = new WeakSet<Redis>();

/**
 * True while a connection that was up is down: reconnecting, or in the middle of a reconnect
 * attempt ('connecting'). Commands sent now would wait in the offline queue for the whole
 * outage, so callers answer 503 at once instead. A connection that was never up yet is not
 * "lost": its first commands just wait for it.
 */
export function isConnectionLost(redis: Redis): boolean {
  if (redis.status === 'ready') return false;
  return everReady.has(redis) || redis.status === 'end' || redis.status === 'close';
}

/** Resolves once the connection is ready, or rejects after `timeoutMs`. */
export async function waitReady(redis: Redis, timeoutMs = 10_000): Promise<void> {
  if (redis.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`Redis not ready after ${timeoutMs} ms (status ${redis.status})`));
    }, timeoutMs);
    const onReady = () => {
      cleanup();
      resolve();
    };
    const cleanup = () => {
      clearTimeout(timer);
      redis.off('ready', onReady);
    };
    redis.on('ready', onReady);
  });
}

/**
 * True for errors that mean "Redis cannot take this right now" rather than a bug: unreachable,
 * loading, read-only, or full (OOM under `maxmemory` with `noeviction`, see docs/redis-keys.md).
 */
export function isRedisDown(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const text = `${err.name} ${err.message}`;
  return /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|enableOfflineQueue|Connection is closed|MaxRetriesPerRequest|Stream isn't writeable|LOADING|CLUSTERDOWN|READONLY|^\S+ OOM /i.test(
    text,
  );
}
