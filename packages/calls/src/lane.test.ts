import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Lane } from './lane.js';
import { Keys } from './keys.js';
import { createRedis, type RedisClient } from './redis.js';
import type { CallJob } from './types.js';

let redis: RedisClient;
let blocking: RedisClient;
let keys: Keys;
let lane: Lane;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
  blocking = createRedis(inject('redisUrl'), 'blocking');
  keys = new Keys(`t${randomUUID().slice(0, 8)}`);
  lane = new Lane(redis, keys, 'fast');
});
afterAll(() => {
  redis.disconnect();
  blocking.disconnect();
});

const HORIZON = 60_000;
const outcome = (id: string) => ({
  json: JSON.stringify({ id, status: 'ok' }),
  event: JSON.stringify({ type: 'outcome' }),
});

function job(clientId: string, args: Record<string, unknown> = {}): CallJob {
  return { id: randomUUID(), tool: 'calculator', args, clientId, acceptedAt: Date.now() };
}

async function drain(): Promise<void> {
  for (;;) {
    const got = (await lane.claim(100, 60_000)).calls;
    if (got.length === 0) return;
    for (const c of got)
      await lane.finish(c.job, outcome(c.job.id), { claimNext: false, leaseMs: 1 });
  }
}

describe('Lane', () => {
  it('serves every client’s first call before anyone’s second, then in arrival order', async () => {
    await drain();
    const a = [job('a'), job('a'), job('a')];
    const b = [job('b'), job('b')];
    for (const j of [...a, ...b]) {
      expect(await lane.enqueue(j, 10, HORIZON, true)).toMatchObject({ admitted: true });
    }
    const order = (await lane.claim(10, 60_000)).calls.map((c) => c.job.id);
    expect(order).toEqual([a[0]!.id, b[0]!.id, a[1]!.id, b[1]!.id, a[2]!.id]);
  });

  it('refuses a client at its limit of calls in flight and admits again once one ended', async () => {
    const [x1, x2, x3] = [job('x'), job('x'), job('x')];
    expect(await lane.enqueue(x1!, 2, HORIZON, false)).toEqual({ admitted: true, priority: 1 });
    expect(await lane.enqueue(x2!, 2, HORIZON, false)).toEqual({ admitted: true, priority: 2 });
    expect(await lane.enqueue(x3!, 2, HORIZON, false)).toEqual({
      admitted: false,
      inFlight: 2,
      scope: 'client',
    });
    // A call that must not be refused (approved by an admin) is counted all the same.
    const approved = job('x');
    expect(await lane.enqueue(approved, 0, HORIZON, false)).toMatchObject({ admitted: true });
    const [first] = (await lane.claim(1, 60_000)).calls;
    expect(first!.job).toEqual(x1);
    await lane.finish(first!.job, outcome(first!.job.id), { claimNext: false, leaseMs: 1 });
    expect(await lane.enqueue(x3!, 2, HORIZON, false)).toMatchObject({ admitted: false });
    await drain();
    expect(await lane.enqueue(x3!, 2, HORIZON, false)).toMatchObject({ admitted: true });
    await drain();
  });

  it('keeps the job exactly as sent (empty arrays, big numbers) through a restart', async () => {
    const sent = job('r', { list: [], nested: { empty: {} }, n: 1234567890.123456, big: 2 ** 52 });
    await lane.enqueue(sent, 10, HORIZON, false);
    const [taken] = (await lane.claim(1, 50)).calls;
    expect(taken).toMatchObject({ job: sent, restarts: 0, deferrals: 0 });
    expect(taken!.job).toEqual(sent);
    // Its worker died: the lease lapses, a sweep hands the call out again, once.
    await new Promise((r) => setTimeout(r, 80));
    expect(await lane.sweep(HORIZON)).toEqual({ again: [sent.id], failed: [] });
    expect(await lane.state(sent.id)).toEqual({ state: 'waiting', job: sent });
    const [again] = (await lane.claim(1, 50)).calls;
    expect(again).toMatchObject({ restarts: 1, deferrals: 0 });
    expect(again!.job).toEqual(sent);
    // Lapsed twice: it fails, and its client's in-flight entry goes with it.
    await new Promise((r) => setTimeout(r, 80));
    expect(await lane.sweep(HORIZON)).toEqual({ again: [], failed: [sent.id] });
    const state = await lane.state(sent.id);
    expect(state).toMatchObject({ state: 'ended', stub: { tool: 'calculator', clientId: 'r' } });
    expect(state?.state === 'ended' && state.stub.failed).toMatch(/stopped twice/);
    expect(await redis.zscore(keys.inFlight('r', 'fast'), sent.id)).toBeNull();
  });

  it('a renewed lease is not swept', async () => {
    const held = job('h');
    await lane.enqueue(held, 10, HORIZON, false);
    await lane.claim(1, 50);
    await lane.renew([held.id], 60_000);
    await new Promise((r) => setTimeout(r, 80));
    expect((await lane.sweep(HORIZON)).again).not.toContain(held.id);
    expect(await lane.state(held.id)).toMatchObject({ state: 'active' });
    await lane.finish(held, outcome(held.id), { claimNext: false, leaseMs: 1 });
  });

  it('ends a call in one step: indexed, out of flight, stub left, reply published, next one taken', async () => {
    await drain();
    const sub = createRedis(inject('redisUrl'), 'blocking');
    try {
      const reply = keys.reply(randomUUID());
      const heard = new Promise<string>((resolve) =>
        sub.on('message', (_c, m: string) => resolve(m)),
      );
      await sub.subscribe(reply);
      const first = { ...job('f'), replyTo: reply };
      const second = job('f');
      await lane.enqueue(first, 10, HORIZON, false);
      await lane.enqueue(second, 10, HORIZON, false);
      const [taken] = (await lane.claim(1, 60_000)).calls;
      const next = await lane.finish(taken!.job, outcome(first.id), {
        claimNext: true,
        leaseMs: 60_000,
      });
      expect(next.map((c) => c.job)).toEqual([second]);
      expect(JSON.parse(await heard)).toEqual({ id: first.id, status: 'ok' });
      expect(await redis.zscore(keys.callIndex('f'), first.id)).not.toBeNull();
      expect(await redis.zscore(keys.inFlight('f', 'fast'), first.id)).toBeNull();
      expect(await lane.state(first.id)).toMatchObject({ state: 'ended', stub: { clientId: 'f' } });
      expect(await lane.state(second.id)).toMatchObject({ state: 'active' });
      const running = await redis.zrange(keys.laneActive('fast'), 0, -1);
      expect(running).toContain(second.id);
      expect(running).not.toContain(first.id);
      expect((await lane.counts()).waiting).toBe(0);
      await lane.finish(second, outcome(second.id), { claimNext: false, leaseMs: 1 });
    } finally {
      sub.disconnect();
    }
  });

  it('briefs a call from a bounded read, whatever its arguments weigh', async () => {
    const heavy = job('b', { blob: 'x'.repeat(200_000), tool: 'not this one' });
    await lane.enqueue(heavy, 10, HORIZON, false);
    expect(await lane.brief(heavy.id)).toEqual({
      tool: 'calculator',
      acceptedAt: heavy.acceptedAt,
      state: 'waiting',
    });
    await redis.zadd(keys.laneQueue('fast'), 0, heavy.id);
    const [taken] = (await lane.claim(1, 60_000)).calls;
    expect(taken!.job).toEqual(heavy);
    expect(await lane.brief(heavy.id)).toMatchObject({ state: 'active' });
    await lane.finish(heavy, outcome(heavy.id), { claimNext: false, leaseMs: 1 });
    expect(await lane.brief(heavy.id)).toMatchObject({ tool: 'calculator', state: 'ended' });
    expect(await lane.brief(randomUUID())).toBeUndefined();
  });

  it('puts a call back for a moment: out of reach until due, then at its place, its deferrals counted', async () => {
    const sandbox = new Lane(redis, keys, 'sandbox');
    const [first, second] = [job('p'), job('q')];
    await sandbox.enqueue(first, 10, HORIZON, false);
    const [taken] = (await sandbox.claim(1, 60_000)).calls;
    expect(await sandbox.defer(taken!, 300)).toBe(1);
    // Not claimable before it is due; the claim says when it will be.
    const early = await sandbox.claim(5, 60_000);
    expect(early.calls).toEqual([]);
    expect(early.nextDueAt).toBeGreaterThan(Date.now());
    expect(await sandbox.state(first.id)).toMatchObject({ state: 'waiting' });
    expect(await sandbox.counts()).toMatchObject({ waiting: 0, delayed: 1 });
    // Meanwhile another client's call arrives, with a later arrival number (same priority).
    await sandbox.enqueue(second, 10, HORIZON, false);
    await new Promise((r) => setTimeout(r, 350));
    const due = (await sandbox.claim(5, 60_000)).calls;
    expect(due.map((c) => c.job.id)).toEqual([first.id, second.id]);
    expect(due[0]).toMatchObject({ deferrals: 1, restarts: 0 });
    expect(due[0]!.job).toEqual(first);
    for (const c of due)
      await sandbox.finish(c.job, outcome(c.job.id), { claimNext: false, leaseMs: 1 });
    // A put-back call can be cancelled like a waiting one.
    const third = job('p');
    await sandbox.enqueue(third, 10, HORIZON, false);
    const [held] = (await sandbox.claim(1, 60_000)).calls;
    await sandbox.defer(held!, 60_000);
    expect(await sandbox.remove(third.id)).toEqual(third);
    expect(await sandbox.counts()).toMatchObject({ waiting: 0, delayed: 0, active: 0 });
  });

  it('a cancel takes a waiting call out, never a running one', async () => {
    const waiting = job('c');
    const running = job('c');
    await lane.enqueue(running, 10, HORIZON, false);
    await lane.claim(1, 60_000);
    await lane.enqueue(waiting, 10, HORIZON, false);
    expect(await lane.remove(waiting.id)).toEqual(waiting);
    expect(await lane.remove(waiting.id)).toBeUndefined();
    expect(await lane.remove(running.id)).toBeUndefined();
    expect(await lane.state(waiting.id)).toBeUndefined();
    await lane.finish(running, outcome(running.id), { claimNext: false, leaseMs: 1 });
  });

  it('wakes an idle worker when a call arrives', async () => {
    await drain();
    await blocking.del(keys.laneWake('fast'));
    const woken = lane.waitForWork(blocking, 5).then(() => Date.now());
    await new Promise((r) => setTimeout(r, 50));
    const sent = Date.now();
    await lane.enqueue(job('w'), 10, HORIZON, false);
    expect((await woken) - sent).toBeLessThan(4000);
    await drain();
  });
  it('shares a client’s turns between its users, holds each user to its own limit, and forgets a user whose calls ended', async () => {
    await drain();
    const of = (user: string) => ({ ...job('u'), user });
    const ann = [of('ann'), of('ann'), of('ann')];
    // Ann alone: 1, 2, 3 (as a client alone); her fourth is over her own limit of 3.
    for (const [i, j] of ann.entries()) {
      expect(await lane.enqueue(j, 10, HORIZON, false, 3)).toEqual({
        admitted: true,
        priority: i + 1,
      });
    }
    expect(await lane.enqueue(of('ann'), 10, HORIZON, false, 3)).toEqual({
      admitted: false,
      inFlight: 3,
      scope: 'user',
    });
    // Ben, of the same client, is not held by Ann's limit, and his first call goes at 2 (two
    // users share the client's turns), not at 4 behind Ann's whole backlog.
    const ben = of('ben');
    expect(await lane.enqueue(ben, 10, HORIZON, false, 3)).toEqual({
      admitted: true,
      priority: 2,
    });
    expect(await redis.zrange(keys.usersInFlight('u', 'fast'), 0, -1)).toEqual(['ann', 'ben']);
    const order = (await lane.claim(10, 60_000)).calls.map((c) => c.job.id);
    expect(order).toEqual([ann[0]!.id, ann[1]!.id, ben.id, ann[2]!.id]);
    // Ben's call ends: he leaves the users set and his in-flight set; Ann stays.
    await lane.finish(ben, outcome(ben.id), { claimNext: false, leaseMs: 1 });
    expect(await redis.zrange(keys.usersInFlight('u', 'fast'), 0, -1)).toEqual(['ann']);
    expect(await redis.zcard(keys.userInFlight('u', 'fast', 'ben'))).toBe(0);
    for (const j of ann) await lane.finish(j, outcome(j.id), { claimNext: false, leaseMs: 1 });
    expect(await redis.exists(keys.usersInFlight('u', 'fast'))).toBe(0);
  });

  it('a claim that takes fewer calls than asked says the queue is drained, and adds no wake-up', async () => {
    await drain();
    const calls = [job('d'), job('e'), job('f')];
    for (const j of calls) await lane.enqueue(j, 10, HORIZON, false);
    await redis.del(keys.laneWake('fast'));
    // Two of three: more wait, so another idle worker is woken for them.
    const some = await lane.claim(2, 60_000);
    expect(some).toMatchObject({ drained: false });
    expect(some.calls).toHaveLength(2);
    expect(await redis.zcard(keys.laneWake('fast'))).toBe(1);
    await redis.del(keys.laneWake('fast'));
    // The last one with room for more: the worker waits for the next enqueue, not claims again.
    const rest = await lane.claim(5, 60_000);
    expect(rest).toMatchObject({ drained: true });
    expect(rest.calls.map((c) => c.job.id)).toEqual([calls[2]!.id]);
    expect(await redis.zcard(keys.laneWake('fast'))).toBe(0);
    for (const c of [...some.calls, ...rest.calls])
      await lane.finish(c.job, outcome(c.job.id), { claimNext: false, leaseMs: 1 });
  });

  it('a sandbox call comes with its cancel marker, taken by a claim or by the end of the one before', async () => {
    const sandbox = new Lane(redis, keys, 'sandbox');
    const [first, second, third] = [job('m'), job('n'), job('o')];
    for (const j of [first, second, third]) await sandbox.enqueue(j, 10, HORIZON, false);
    await redis.set(keys.cancelled(first.id), 'ops', 'EX', 60);
    await redis.set(keys.cancelled(third.id), 'alice', 'EX', 60);
    const claimed = (await sandbox.claim(2, 60_000)).calls;
    expect(claimed.map((c) => [c.job.id, c.cancelledBy])).toEqual([
      [first.id, 'ops'],
      [second.id, null],
    ]);
    const [next] = await sandbox.finish(first, outcome(first.id), {
      claimNext: true,
      leaseMs: 60_000,
    });
    expect(next).toMatchObject({ job: third, cancelledBy: 'alice' });
    // Fast calls go by the cancels their worker heard: no marker read.
    const fast = job('m');
    await lane.enqueue(fast, 10, HORIZON, false);
    await redis.set(keys.cancelled(fast.id), 'ops', 'EX', 60);
    const [taken] = (await lane.claim(1, 60_000)).calls;
    expect(taken!.cancelledBy).toBeUndefined();
    for (const c of [second.id, third.id].map((id) => ({ id })))
      await sandbox.finish({ ...first, id: c.id }, outcome(c.id), { claimNext: false, leaseMs: 1 });
    await lane.finish(fast, outcome(fast.id), { claimNext: false, leaseMs: 1 });
  });

  it('a call whose workers stopped twice fails, and its waiting gateway hears so at once', async () => {
    await drain();
    const channel = keys.reply(randomUUID());
    const heard = new Promise<string>((resolve) => {
      blocking.once('message', (_ch: string, message: string) => resolve(message));
    });
    await blocking.subscribe(channel);
    const call = { ...job('z'), replyTo: channel };
    await lane.enqueue(call, 10, HORIZON, false);
    for (const expected of [
      { again: [call.id], failed: [] },
      { again: [], failed: [call.id] },
    ]) {
      expect((await lane.claim(1, 1)).calls).toHaveLength(1);
      await new Promise((r) => setTimeout(r, 10));
      expect(await lane.sweep(HORIZON)).toEqual(expected);
    }
    expect(JSON.parse(await heard)).toMatchObject({
      id: call.id,
      status: 'error',
      error: { code: 'worker_error' },
    });
    await blocking.unsubscribe(channel);
  });
});
