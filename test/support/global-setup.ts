import type { TestProject } from 'vitest/node';
import type { RedisTarget } from '@toolgate/calls';
import { startRedisCluster, type RedisCluster } from './redis-cluster.js';
import { startRedisServer, type RedisServer } from './redis-server.js';

/**
 * One real Redis for the whole run: REDIS_URL when set; otherwise a `redis-server` on a free
 * loopback port; otherwise a testcontainers Redis where Docker can pull images.
 */
let server: RedisServer | undefined;
let container: { stop(): Promise<unknown> } | undefined;
let cluster: RedisCluster | undefined;

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
  if (project.name === 'cluster') {
    // The `cluster` project runs the integration suite against a real 3-master Redis Cluster.
    cluster = await startRedisCluster();
    project.provide('redisTarget', { cluster: { nodes: cluster.nodes } });
    project.provide('redisUrl', `redis://${cluster.nodes[0]}`);
    return async () => {
      await cluster?.stop();
    };
  }
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
  project.provide('redisTarget', { url });
  return async () => {
    await server?.stop();
    await container?.stop();
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    /** A plain server's URL (on the cluster project: one node, for CLUSTER commands). */
    redisUrl: string;
    /** What a test stack's `redis` section is: `{url}`, or `{cluster}` on the cluster project. */
    redisTarget: RedisTarget;
  }
}
