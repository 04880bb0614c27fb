import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { followFailovers } from './failover-watch.js';

/** A connection to a single server, a Sentinel-managed master, or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/** Where Redis is (the `redis` section of the config; docs/redis-ha.md). */
export interface RedisTarget {
  url?: string | undefined;
  sentinel?:
    | {
        name: string;
        nodes: string[];
        password?: string | undefined;
        username?: string | undefined;
        sentinelPassword?: string | undefined;
      }
    | undefined;
  cluster?:
    { nodes: string[]; password?: string | undefined; username?: string | undefined } | undefined;
  tls?:
    | { caFile?: string | undefined; servername?: string | undefined; rejectUnauthorized: boolean }
    | undefined;
}

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/** What a log line or `config check` may show of a target: no passwords. */
export function describeRedis(target: RedisTarget | string): string {
  if (typeof target === 'string') return redactUrl(target);
  if (target.sentinel)
    return `sentinel ${target.sentinel.name} via ${target.sentinel.nodes.join(',')}${target.tls ? ' (tls)' : ''}`;
  if (target.cluster)
    return `cluster via ${target.cluster.nodes.join(',')}${target.tls ? ' (tls)' : ''}`;
  return redactUrl(target.url ?? DEFAULT_REDIS_URL);
}

function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url;
  }
}

/** `host:port` (IPv6 as `[addr]:port`) as ioredis wants a node. */
function node(hostPort: string): { host: string; port: number } {
  const at = hostPort.lastIndexOf(':');
  return {
    host: hostPort.slice(0, at).replace(/^\[|\]$/g, ''),
    port: Number(hostPort.slice(at + 1)),
  };
}

function tlsOptions(target: RedisTarget): ConnectionOptions | undefined {
  if (!target.tls) return undefined;
  return {
    ...(target.tls.caFile ? { ca: readFileSync(target.tls.caFile) } : {}),
    ...(target.tls.servername ? { servername: target.tls.servername } : {}),
    rejectUnauthorized: target.tls.rejectUnauthorized,
  };
}

/**
 * Redis connections. `command` connections give up on a command after one failed reconnect
 * (the gateway answers 503 instead of hanging; commands sent while first connecting just
 * wait); `blocking` ones wait and reconnect forever (queue consumers and event readers).
 *
 * Behind Sentinel, a connection asks the sentinels for the master at each (re)connect and
 * follows their `+switch-master` (failover-watch.ts), and so do its duplicates, so a failover
 * costs one reconnect; a command that meets
 * a demoted master (`READONLY`) reconnects and is sent again. On a Cluster, commands follow
 * `MOVED`/`ASK` redirections and are retried through a failover (`CLUSTERDOWN`, `TRYAGAIN`).
 */
export function createRedis(
  target: RedisTarget | string,
  kind: 'command' | 'blocking',
  options: RedisOptions = {},
): RedisClient {
  const t: RedisTarget = typeof target === 'string' ? { url: target } : target;
  const retries: RedisOptions =
    kind === 'blocking'
      ? { maxRetriesPerRequest: null, enableOfflineQueue: true }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: true };
  const common: RedisOptions = {
    lazyConnect: false,
    // Commands issued in the same tick go out in one write: fewer syscalls under load.
    enableAutoPipelining: false,
    retryStrategy: (times) => Math.min(times * 200, 2000),
    // A master demoted by a failover answers writes with READONLY: reconnect (to the new
    // master, through the sentinels or DNS) and resend the command.
    reconnectOnError: (err) => (/^READONLY/.test(err.message) ? 2 : false),
    ...retries,
    ...options,
  };
  const tls = tlsOptions(t);
  let redis: RedisClient;
  if (t.cluster) {
    const clusterOptions: ClusterOptions = {
      redisOptions: {
        ...common,
        ...(t.cluster.password !== undefined ? { password: t.cluster.password } : {}),
        ...(t.cluster.username !== undefined ? { username: t.cluster.username } : {}),
        ...(tls ? { tls } : {}),
      },
      enableOfflineQueue: common.enableOfflineQueue ?? true,
      enableAutoPipelining: false,
      lazyConnect: common.lazyConnect ?? false,
      clusterRetryStrategy: (times) => common.retryStrategy?.(times) ?? null,
      // A failover takes the cluster a few seconds (cluster-node-timeout + election): keep
      // retrying commands through it rather than failing them at once.
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 300,
      retryDelayOnTryAgain: 200,
      maxRedirections: 32,
      slotsRefreshTimeout: 2000,
      // After a failover, commands for the dead master's slots fail until the slot map is
      // reloaded; ioredis's 5 s default left calls failing for seconds after the promotion.
      slotsRefreshInterval: 1000,
      scaleReads: 'master',
    };
    redis = new Cluster(t.cluster.nodes.map(node), clusterOptions);
  } else if (t.sentinel) {
    const s = t.sentinel;
    const sentinels = s.nodes.map(node);
    const sentinelAuth: RedisOptions = {
      ...(s.sentinelPassword !== undefined ? { password: s.sentinelPassword } : {}),
      ...(tls ? { tls } : {}),
    };
    const client = new Redis({
      ...common,
      sentinels,
      name: s.name,
      role: 'master',
      // Not ioredis's failoverDetector: see failover-watch.ts.
      sentinelRetryStrategy: (times) => Math.min(times * 200, 2000),
      ...(s.password !== undefined ? { password: s.password } : {}),
      ...(s.username !== undefined ? { username: s.username } : {}),
      ...(s.sentinelPassword !== undefined ? { sentinelPassword: s.sentinelPassword } : {}),
      ...(tls ? { tls, sentinelTLS: tls, enableTLSForSentinelMode: true } : {}),
    });
    followFailovers(client, sentinels, s.name, sentinelAuth);
    // A duplicate of the connection (a blocking one made from it) follows failovers too.
    const duplicate = client.duplicate.bind(client);
    client.duplicate = (override?: Partial<RedisOptions>) => {
      const copy = duplicate(override);
      followFailovers(copy, sentinels, s.name, sentinelAuth);
      return copy;
    };
    redis = client;
  } else {
    redis = new Redis(t.url ?? DEFAULT_REDIS_URL, { ...common, ...(tls ? { tls } : {}) });
  }
  // Connection errors surface as failed commands (503s, /readyz); without a listener ioredis
  // would print every reconnect attempt.
  redis.on('error', () => undefined);
  redis.on('ready', () => everReady.add(redis));
  return redis;
}

const everReady = new WeakSet<RedisClient>();

/**
 * True while a connection that was up is down: reconnecting, or in the middle of a reconnect
 * attempt ('connecting'). Commands sent now would wait in the offline queue for the whole
 * outage, so callers answer 503 at once instead. A connection that was never up yet is not
 * "lost": its first commands just wait for it.
 */
export function isConnectionLost(redis: RedisClient): boolean {
  if (redis.status === 'ready') return false;
  return everReady.has(redis) || redis.status === 'end' || redis.status === 'close';
}

/** Resolves once the connection is ready, or rejects after `timeoutMs`. */
export async function waitReady(redis: RedisClient, timeoutMs = 10_000): Promise<void> {
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
 * Behind Sentinel also: no sentinel answers, a master refusing writes for want of replicas
 * (`min-replicas-to-write`: NOREPLICAS), a replica cut off from its master (MASTERDOWN), and a
 * blocked command ended by a failover (UNBLOCKED).
 */
export function isRedisDown(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const text = `${err.name} ${err.message}`;
  return /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|enableOfflineQueue|Connection is closed|MaxRetriesPerRequest|Stream isn't writeable|LOADING|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|READONLY|NOREPLICAS|UNBLOCKED|Too many Cluster redirections|None of startup nodes|Failed to refresh slots|All sentinels are unreachable|failed to connect to sentinel|^\S+ OOM /i.test(
    text,
  );
}
