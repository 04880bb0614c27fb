import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import type { TestProject } from 'vitest/node';

/**
 * One real Redis for the whole run: REDIS_URL when set; otherwise a `redis-server` on a free
 * loopback port; otherwise a testcontainers Redis where Docker can pull images.
 */
let child: ChildProcess | undefined;
let container: { stop(): Promise<unknown> } | undefined;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

async function startLocalRedis(): Promise<string> {
  const port = await freePort();
  child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      stdio: 'ignore',
    },
  );
  await new Promise<void>((resolve, reject) => {
    child!.once('error', (err) =>
      reject(new Error(`cannot start redis-server (${err.message}); install it or set REDIS_URL`)),
    );
    child!.once('spawn', () => resolve());
  });
  const { Redis } = await import('ioredis');
  const probe = new Redis(port, '127.0.0.1', {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  for (let i = 0; i < 100; i++) {
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      return `redis://127.0.0.1:${port}`;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error('redis-server did not answer');
}

async function startContainerRedis(): Promise<string> {
  const { GenericContainer } = await import('testcontainers');
  const started = await new GenericContainer('redis:7-alpine').withExposedPorts(6379).start();
  container = started;
  return `redis://${started.getHost()}:${started.getMappedPort(6379)}`;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let url = process.env.REDIS_URL;
  if (!url) {
    try {
      url = await startLocalRedis();
    } catch (err) {
      // No redis-server here: a container, where Docker can pull images.
      url = await startContainerRedis().catch((cause: unknown) => {
        throw new Error(
          `no Redis for the tests: ${(err as Error).message}; testcontainers: ${(cause as Error).message}`,
        );
      });
    }
  }
  project.provide('redisUrl', url);
  return async () => {
    child?.kill('SIGTERM');
    await container?.stop();
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}
