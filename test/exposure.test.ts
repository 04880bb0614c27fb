/**
 * What the gateway tells whoever can reach its public port without a key: no metrics (their
 * series name every client, tool and error code) and no Redis error text from /readyz (it can
 * name Redis's address). Real gateways against real redis-servers and a real Redis Cluster.
 */
import { Keys } from '@toolgate/calls';
import { parseConfig } from '@toolgate/config';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { keySlot, startRedisCluster } from './support/redis-cluster.js';
import { startRedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.close();
  stack = undefined;
});

describe('/metrics', () => {
  it('is 404 on the public port, with or without a key, and served on the metrics listener', async () => {
    stack = await startStack();
    const call = await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } });
    expect(call.status).toBe(200);

    for (const key of [null, KEYS.alice, KEYS.admin]) {
      const res = await stack.call('/metrics', { key });
      expect(res.status, `key ${key}`).toBe(404);
      const text = await res.text();
      expect(text).not.toContain('toolgate_');
      expect(JSON.parse(text)).toMatchObject({ error: { code: 'not_found' } });
    }

    const metrics = await fetch(stack.metricsUrl);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/^toolgate_calls_total\{[^}]*client="alice"/m);
    // The metrics listener serves metrics only: not the API, not the console.
    const base = stack.metricsUrl.replace(/\/metrics$/, '');
    for (const path of ['/v1/calls', '/tools/openai', '/console/', '/healthz']) {
      expect((await fetch(base + path)).status, path).toBe(404);
    }
  });
});

describe('/readyz', () => {
  it('Redis down: a fixed reason, no address in the answer', async () => {
    const redis = await startRedisServer();
    try {
      stack = await startStack({
        worker: false,
        config: { redis: { url: redis.url, prefix: `rz${randomUUID().slice(0, 6)}` } },
      });
      // Redis answers (no worker here, which /readyz says), then goes away.
      expect(await (await stack.call('/readyz', { key: null })).json()).toEqual({
        status: 'unavailable',
        reason: 'no worker is alive',
      });
      await redis.stop();
      const res = await stack.call('/readyz', { key: null });
      expect(res.status).toBe(503);
      const text = await res.text();
      expect(JSON.parse(text)).toEqual({ status: 'unavailable', reason: 'Redis connection lost' });
      expect(text).not.toContain('127.0.0.1');
      expect(text).not.toContain(String(redis.port));
    } finally {
      await redis.stop();
    }
  });

  it("Redis answers with an error naming a node's address (a cluster node given as a url): the answer does not repeat it", async () => {
    const cluster = await startRedisCluster({ masters: 3, replicas: 0 });
    try {
      const prefix = `rz${randomUUID().slice(0, 6)}`;
      const workersKey = Keys.for(parseConfig({ redis: { prefix } }, {}).redis).workers;
      await cluster.waitHealthy(30_000, await keySlot(cluster, workersKey));
      const owner = await cluster.ownerOf(await keySlot(cluster, workersKey));
      // Any node but the owner answers reads of the key with `MOVED <slot> <owner's address>`.
      const other = cluster.nodes.find((n) => n !== owner)!;
      stack = await startStack({
        worker: false,
        config: { redis: { url: `redis://${other}`, prefix } },
      });
      const res = await stack.call('/readyz', { key: null });
      expect(res.status).toBe(503);
      const text = await res.text();
      expect(JSON.parse(text)).toEqual({ status: 'unavailable', reason: 'Redis does not answer' });
      for (const node of cluster.nodes) expect(text).not.toContain(node.split(':')[1]);
      expect(text).not.toContain('127.0.0.1');
    } finally {
      await stack?.close();
      stack = undefined;
      await cluster.stop();
    }
  }, 60_000);
});
