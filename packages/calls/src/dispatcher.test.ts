import { randomUUID } from 'node:crypto';
import { Worker } from 'bullmq';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Dispatcher } from './dispatcher.js';
import { Keys } from './keys.js';
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
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let taken!: () => void;
    const takenBy = new Promise<void>((r) => (taken = r));
    // A worker that takes the job and holds it, as toolgate's worker does for the moment between
    // BullMQ handing it out and the lease check that sends a client's extra call back.
    const connection = createRedis(inject('redisTarget'), 'blocking');
    const worker = new Worker(
      keys.queue('sandbox'),
      async () => {
        taken();
        await held;
        return { status: 'ok' };
      },
      { connection, prefix: keys.bullPrefix },
    );
    try {
      await dispatcher.enqueue(
        { id, tool: 'run_shell', args: {}, clientId: 'alice', acceptedAt: Date.now() },
        'sandbox',
      );
      await takenBy;
      expect(await dispatcher.queue('sandbox').getJobState(id)).toBe('active');
      expect((await dispatcher.lookup(id))?.status).toBe('queued');
      await redis.zadd(keys.running('alice', 'sandbox'), Date.now() + 60_000, id);
      expect((await dispatcher.lookup(id))?.status).toBe('running');
    } finally {
      release();
      await worker.close();
      connection.disconnect();
    }
  });
});
