import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CallStore } from './store.js';
import { Dispatcher } from './dispatcher.js';
import { Keys } from './keys.js';
import { Worker } from 'bullmq';
import { CallQueue } from './call-queue.js';
import { createRedis, type RedisClient } from './redis.js';
import { SessionStore } from './sessions.js';
import type { CallJob } from './types.js';

let redis: RedisClient;
let subscriber: RedisClient;
let keys: Keys;
let store: SessionStore;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
  subscriber = createRedis(inject('redisUrl'), 'blocking');
  keys = new Keys(`t${randomUUID().slice(0, 8)}`);
  store = new SessionStore(redis, keys, 4000);
});
afterAll(() => {
  redis.disconnect();
  subscriber.disconnect();
});

const create = (clientId: string, workerId = 'w1', cap = 4) =>
  store.create({
    clientId,
    tool: 'run_python',
    workerId,
    cap,
    idleMs: 60_000,
    lifetimeMs: 600_000,
  });

describe('SessionStore', () => {
  it('never lets a client past its cap, however many ask at once', async () => {
    const results = await Promise.all(Array.from({ length: 20 }, () => create('capped')));
    expect(results.filter((r) => r.created)).toHaveLength(4);
    expect(results.filter((r) => !r.created)).toEqual(
      Array.from({ length: 16 }, () => ({ created: false, sessions: 4, scope: 'client' })),
    );
    expect(await store.list('capped')).toHaveLength(4);
  });

  it("never lets a user past its share, however many ask at once; the client's others still fit", async () => {
    const asUser = (user: string) =>
      store.create({
        clientId: 'shared',
        user,
        tool: 'run_python',
        workerId: 'w1',
        cap: 6,
        userCap: 2,
        idleMs: 60_000,
        lifetimeMs: 600_000,
      });
    const results = await Promise.all(Array.from({ length: 20 }, () => asUser('ann')));
    expect(results.filter((r) => r.created)).toHaveLength(2);
    expect(results.filter((r) => !r.created)).toEqual(
      Array.from({ length: 18 }, () => ({ created: false, sessions: 2, scope: 'user' })),
    );
    expect((await asUser('ben')).created).toBe(true);
    expect(await store.list('shared', 'ann')).toHaveLength(2);
    expect(await store.list('shared', 'ben')).toHaveLength(1);
    expect(await store.list('shared', null)).toHaveLength(0);
    expect(await store.list('shared')).toHaveLength(3);
    // Another user's remove finds nothing; the user's own, or the client's (no user), does.
    const [first] = await store.list('shared', 'ann');
    expect(await store.remove(first!.id, 'shared', 'ben')).toBeUndefined();
    expect(await store.remove(first!.id, 'shared', null)).toBeUndefined();
    expect(await store.remove(first!.id, 'shared', 'ann')).toBe('w1');
  });

  it('removes only the owner’s session, and tells its host', async () => {
    const made = await create('owner');
    if (!made.created) throw new Error('not created');
    const heard: string[] = [];
    subscriber.on('message', (_channel: string, message: string) => heard.push(message));
    await subscriber.subscribe(keys.sessionKills);
    expect(await store.remove(made.id, 'someone-else')).toBeUndefined();
    expect(await store.get(made.id)).toMatchObject({ clientId: 'owner', workerId: 'w1' });
    expect(await store.remove(made.id, 'owner')).toBe('w1');
    expect(await store.get(made.id)).toBeUndefined();
    for (let i = 0; i < 50 && heard.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(heard).toEqual([JSON.stringify({ id: made.id })]);
  });

  it('a lost host: its queued calls end session_lost once, its sessions are marked lost', async () => {
    const made = await create('lost-client', 'dead-worker');
    if (!made.created) throw new Error('not created');
    const lane = new CallQueue(redis, keys, 'sandbox', keys.sessionQueue('dead-worker'));
    const reply = keys.reply('gw');
    const job: CallJob = {
      id: randomUUID(),
      tool: 'run_python',
      args: { code: '1' },
      clientId: 'lost-client',
      acceptedAt: Date.now(),
      replyTo: reply,
      session: { id: made.id, host: 'dead-worker' },
    };
    expect(await lane.enqueue(job, 10, 60_000, false)).toMatchObject({ admitted: true });
    const replies: string[] = [];
    const listener = createRedis(inject('redisUrl'), 'blocking');
    listener.on('message', (_c: string, m: string) => replies.push(m));
    await listener.subscribe(reply);
    const [first, second] = await Promise.all([
      store.reapHost('dead-worker'),
      store.reapHost('dead-worker'),
    ]);
    expect(first + second).toBe(1);
    for (let i = 0; i < 50 && replies.length === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    listener.disconnect();
    expect(replies.map((r) => JSON.parse(r) as unknown)).toEqual([
      expect.objectContaining({
        id: job.id,
        error: expect.objectContaining({ code: 'session_lost' }),
      }),
    ]);
    // A gateway that missed the reply and polls hears the same (not worker_error).
    const dispatcher = new Dispatcher(
      redis,
      subscriber,
      keys,
      new CallStore(redis, keys, 3600, 65_536),
    );
    expect(await dispatcher.ended(job.id)).toEqual(JSON.parse(replies[0]!));
    expect(await store.get(made.id)).toMatchObject({ lost: true });
    expect(await store.list('lost-client')).toEqual([]);
    expect(await redis.zcard(keys.inFlight('lost-client', 'sandbox'))).toBe(0);
    await lane.close();
  });

  it('a session queue serves its calls in the order they came, whatever else the client runs', async () => {
    const lane = new CallQueue(redis, keys, 'sandbox', keys.sessionQueue('ordered'));
    const shared = new CallQueue(redis, keys, 'sandbox');
    const job = (n: number): CallJob => ({
      id: randomUUID(),
      tool: 'run_python',
      args: { n },
      clientId: 'busy',
      acceptedAt: Date.now(),
    });
    // A call sent while the client has others in flight would get a later fair place than one
    // sent after they ended: not in a session's queue.
    const others = [100, 101, 102].map(job);
    for (const j of others) await shared.enqueue(j, 100, 60_000, false);
    await lane.enqueue(job(0), 100, 60_000, false);
    for (const j of others) await shared.release(j, { json: '{}', event: '{}' });
    for (const n of [1, 2, 3]) await lane.enqueue(job(n), 100, 60_000, false);
    const worker = new Worker(lane.name, null, {
      connection: subscriber.duplicate(),
      prefix: keys.queuePrefix,
      autorun: false,
    });
    const claimed: unknown[] = [];
    for (let i = 0; i < 4; i++) {
      const taken = await worker.getNextJob(`t${i}`, { block: false });
      claimed.push((taken?.data as CallJob | undefined)?.args.n);
    }
    expect(claimed).toEqual([0, 1, 2, 3]);
    await worker.close();
    await Promise.all([lane.close(), shared.close()]);
  });
});
