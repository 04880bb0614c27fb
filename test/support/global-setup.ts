import type { TestProject } from 'vitest/node';
import { startRedisServer, type RedisServer } from './redis-server.js';

/**
 * One real Redis for the whole run: REDIS_URL when set; otherwise a `redis-server` on a free
 * loopback port; otherwise a testcontainers Redis where Docker can pull images.
 */
let server: RedisServer | undefined;
let container: { stop(): Promise<unknown> } | undefined;

async function startLocalRedis(): Promise<string> {
  server = await startRedisServer();
  return server.url;
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
    await server?.stop();
    await container?.stop();
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}
