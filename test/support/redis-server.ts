/**
 * Real redis-server processes for tests: the run's shared one (global-setup.ts) and private ones
 * for files that stop Redis or measure its memory. Loopback only, no persistence.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      srv.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

export interface RedisServer {
  port: number;
  url: string;
  child: ChildProcess;
  /** SIGTERM, resolved once the process has exited. */
  stop(): Promise<void>;
}

/**
 * Starts redis-server on `port` (default: a free one) and resolves once it answers PING.
 * `extraArgs` go after the defaults (e.g. `['--maxmemory-policy', 'allkeys-lru']`).
 */
export async function startRedisServer(
  port?: number,
  extraArgs: readonly string[] = [],
): Promise<RedisServer> {
  const listen = port ?? (await freePort());
  const child = spawn(
    'redis-server',
    [
      '--port',
      String(listen),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      ...extraArgs,
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    child.once('error', (err) =>
      reject(new Error(`cannot start redis-server (${err.message}); install it or set REDIS_URL`)),
    );
    child.once('spawn', () => resolve());
  });
  try {
    await untilRedisAnswers(listen, child, 'redis-server');
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  return {
    port: listen,
    url: `redis://127.0.0.1:${listen}`,
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** Resolves once a Redis process (server or sentinel) on `port` answers PING (≤ 10 s). */
export async function untilRedisAnswers(
  port: number,
  child: ChildProcess,
  what: string,
): Promise<void> {
  const probe = new Redis(port, '127.0.0.1', {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  probe.on('error', () => undefined);
  try {
    for (let i = 0; i < 200; i++) {
      if (child.exitCode !== null) throw new Error(`${what} exited at start`);
      try {
        if (probe.status !== 'ready') await probe.connect();
        await probe.ping();
        return;
      } catch {
        probe.disconnect();
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    throw new Error(`${what} did not answer on port ${port}`);
  } finally {
    probe.disconnect();
  }
}

/**
 * One redis-server per id as the shards of one deployment (docs/sharding.md), the first the
 * home shard: the servers by id, and the `redis.shards` entries naming them.
 */
export async function startShardServers<Id extends string>(
  ids: readonly Id[],
  argsOf: (id: Id) => readonly string[] = () => [],
): Promise<{
  servers: Record<Id, RedisServer>;
  shards: { id: Id; url: string; home?: true }[];
}> {
  const started = await Promise.all(ids.map((id) => startRedisServer(undefined, argsOf(id))));
  return {
    servers: Object.fromEntries(ids.map((id, i) => [id, started[i]!])) as Record<Id, RedisServer>,
    shards: ids.map((id, i) => ({ id, url: started[i]!.url, ...(i === 0 ? { home: true } : {}) })),
  };
}
