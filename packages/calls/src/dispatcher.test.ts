import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Dispatcher } from './dispatcher.js';
import { Keys } from './keys.js';
import { Worker } from 'bullmq';
import { createRedis, type RedisClient } from './redis.js';
import { CallStore } from './store.js';

let redis: RedisClient;
let subscriber: RedisClient;
let keys: Keys;
let dispatcher: Dispatcher;
beforeAll(() => {
  const target = inject('redisTarget');
  redis = createRedis(target, 'command');
  subscriber = createRedis(target, 'blocking');
  keys = Keys.for({ prefix: `t${randomUUID().slice(0, 8)}`, cluster: target.cluster });
  dispatcher = new Dispatcher(redis, subscriber, keys, new CallStore(redis, keys, 3600, 65_536));
});
afterAll(async () => {
  await dispatcher.close();
  redis.disconnect();
  subscriber.disconnect();
});

describe('Dispatcher.lookup', () => {
  it('reads a sandbox call a worker holds without its client lease as queued, and as running once leased', async () => {
    const id = randomUUID();
    const job = { id, tool: 'run_shell', args: {}, clientId: 'alice', acceptedAt: Date.now() };
    expect(await dispatcher.enqueue(job, 'sandbox', 10, 60_000)).toMatchObject({ admitted: true });
    expect((await dispatcher.lookup(id))?.status).toBe('queued');
    // A worker takes it and holds it, as toolgate's worker does for the moment between the
    // claim and the lease check that sends a client's extra call back.
    const worker = new Worker('sandbox', null, {
      connection: subscriber.duplicate(),
      prefix: keys.queuePrefix,
      autorun: false,
    });
    const taken = await worker.getNextJob('test-token');
    expect(taken?.id).toBe(id);
    expect((await dispatcher.lookup(id))?.status).toBe('queued');
    await redis.zadd(keys.running('alice', 'sandbox'), Date.now() + 60_000, id);
    expect((await dispatcher.lookup(id))?.status).toBe('running');
    await worker.close();
  });
});
