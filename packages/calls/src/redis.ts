import { Redis, type RedisOptions } from 'ioredis';

/**
 * Redis connections. `command` connections fail fast while Redis is down (the gateway answers
 * 503 instead of hanging); `blocking` ones wait and reconnect forever (BullMQ workers and
 * queue-event readers need that).
 */
export function createRedis(url: string, kind: 'command' | 'blocking', options: RedisOptions = {}): Redis {
  const common: RedisOptions = {
    lazyConnect: false,
    retryStrategy: (times) => Math.min(times * 200, 2000),
    ...options,
  };
  if (kind === 'blocking') {
    return new Redis(url, { ...common, maxRetriesPerRequest: null, enableOfflineQueue: true });
  }
  return new Redis(url, { ...common, maxRetriesPerRequest: 1, enableOfflineQueue: false });
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

/** True for errors that mean "Redis is unreachable right now" rather than a bug. */
export function isRedisDown(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const text = `${err.name} ${err.message}`;
  return /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|enableOfflineQueue|Connection is closed|MaxRetriesPerRequest|Stream isn't writeable|LOADING|CLUSTERDOWN|READONLY/i.test(
    text,
  );
}
