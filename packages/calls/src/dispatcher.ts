import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import { Queue } from 'bullmq';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import type { CallStore } from './store.js';
import { FastLane, type LaneAdmit } from './fast-lane.js';
import { Upkeep } from './upkeep.js';
import type { CallBrief, CallJob, CallOutcome, CallRecord, QueueKind } from './types.js';

/** The queues on BullMQ: sandbox calls. Fast calls go through the FastLane. */
const BULL_KINDS = ['sandbox'] as const;
type BullKind = (typeof BULL_KINDS)[number];
/** Fallback checks of a waited-for call (a reply lost in a reconnect, a job BullMQ failed). */
const POLL_FIRST_MS = 1000;
const POLL_MAX_MS = 5000;
/**
 * Finished jobs BullMQ keeps. A completed job only bridges the few milliseconds until the
 * worker's batched record write lands (its return value is a marker, not the outcome);
 * a failed job is the only trace of its call (no record is written), so it stays an hour.
 * Both are counted as well as aged, so a burst cannot pile up job hashes (each holds its
 * call's arguments, up to `server.bodyLimitBytes`).
 */
export const KEEP_COMPLETED = { age: 30, count: 1000 };
export const KEEP_FAILED = { age: 3600, count: 1000 };
/** How long `lookup` waits once for the record of a job that just completed. */
const RECORD_GRACE_MS = 25;

/** Settles one wait: with the outcome, or undefined (timed out, cancelled). */
type Waiter = (outcome: CallOutcome | undefined) => void;

/**
 * The gateway's side of the queue: enqueues calls and waits for their outcomes. Workers
 * publish each outcome on the waiting gateway's own channel (`replyTo` in the job), so a
 * result travels in one hop; a slow poll of the job's state backs that up.
 */
export class Dispatcher {
  private readonly queues: Record<BullKind, Queue>;
  readonly lane: FastLane;
  /** When a client's in-flight set last got its pruning and expiry (once a second is enough). */
  private readonly upkeep = new Upkeep(1000);
  private readonly waiters = new Map<string, Set<Waiter>>();
  private readonly readyWaiters = new Set<() => void>();
  /** Where workers publish the outcomes this gateway waits for. */
  readonly replyChannel: string;
  private readonly replies: RedisClient;
  private subscribed: Promise<unknown>;

  constructor(
    private readonly connection: RedisClient,
    /** The subscriber connection for replies (a blocking one: it reconnects forever). */
    subscriber: RedisClient,
    private readonly keys: Keys,
    private readonly store: CallStore,
  ) {
    this.queues = Object.fromEntries(
      BULL_KINDS.map((kind) => [
        kind,
        new Queue(keys.queue(kind), { connection, prefix: keys.bullPrefix }),
      ]),
    ) as Record<BullKind, Queue>;
    this.lane = new FastLane(connection, keys);
    for (const q of Object.values(this.queues)) q.on('error', () => undefined);
    this.replyChannel = keys.reply(randomUUID());
    this.replies = subscriber;
    this.replies.on('message', (channel: string, message: string) => {
      // The connection also carries other channels (call events).
      if (channel !== this.replyChannel) return;
      const outcome = parseOutcome(message);
      this.settle(outcome.id, outcome);
    });
    this.replies.on('ready', () => {
      for (const onReady of [...this.readyWaiters]) onReady();
    });
    // ioredis re-subscribes by itself after a reconnect (autoResubscribe).
    this.subscribed = this.replies.subscribe(this.replyChannel).catch(() => undefined);
  }

  /**
   * True once replies can be received; false if that takes over `timeoutMs`. Callers wait in
   * `readyWaiters` behind the one 'ready' listener, and leave it when they time out: a
   * listener per call would pile up on the connection for as long as a Redis outage lasts.
   */
  ready(timeoutMs: number): Promise<boolean> {
    if (this.replies.status === 'ready') return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.readyWaiters.delete(onReady);
        resolve(ok);
      };
      const onReady = () => done(true);
      const timer = setTimeout(() => done(false), timeoutMs);
      this.readyWaiters.add(onReady);
    });
  }

  /** The BullMQ queue of sandbox calls. */
  queue(kind: BullKind): Queue {
    return this.queues[kind];
  }

  /** Calls waiting, put back for a moment (delayed), running and failed in one queue. */
  async counts(
    kind: QueueKind,
  ): Promise<{ waiting: number; active: number; delayed: number; failed: number }> {
    if (kind === 'fast') return { ...(await this.lane.counts()), delayed: 0, failed: 0 };
    const c = await this.queues[kind].getJobCounts(
      'waiting',
      'active',
      'delayed',
      'failed',
      'prioritized',
    );
    return {
      waiting: (c.waiting ?? 0) + (c.prioritized ?? 0),
      active: c.active ?? 0,
      delayed: c.delayed ?? 0,
      failed: c.failed ?? 0,
    };
  }

  /**
   * A fast call: admitted against the client's `limit` of calls in flight (0: never refused,
   * for approved calls) and queued in one round trip (FastLane).
   */
  async enqueueFast(job: CallJob, limit: number, staleAfterMs: number): Promise<LaneAdmit> {
    await this.subscribed;
    try {
      const upkeep = this.upkeep.due(job.clientId);
      return await this.lane.enqueue(job, limit, staleAfterMs, upkeep);
    } catch (err) {
      this.cancel(job.id);
      throw err;
    }
  }

  /**
   * `priority` (1 = first) orders the queue fairly across clients: the gateway gives each call
   * its place in its client's backlog (see Admission).
   */
  async enqueue(job: CallJob, kind: BullKind, priority?: number): Promise<void> {
    await this.subscribed;
    try {
      await this.queues[kind].add(job.tool, job, {
        jobId: job.id,
        // A client's first call needs no priority: BullMQ serves its plain wait list before any
        // prioritized job, first come first served, which is the order priority 1 would get,
        // and a plain add costs Redis less than a prioritized one.
        ...(priority === undefined || priority <= 1 ? {} : { priority }),
        removeOnComplete: KEEP_COMPLETED,
        removeOnFail: KEEP_FAILED,
      });
    } catch (err) {
      // Not accepted, so no outcome will come: end the wait registered for it rather than
      // leave its timers polling Redis until the tool's timeout (every call of an outage).
      this.cancel(job.id);
      throw err;
    }
  }

  /**
   * Resolves with the call's outcome, or undefined after `timeoutMs`. Register with
   * `expect(id)` before enqueueing so a fast completion is never missed.
   */
  expect(id: string, timeoutMs: number): Promise<CallOutcome | undefined> {
    return new Promise((resolve) => {
      const started = Date.now();
      let poll: NodeJS.Timeout | undefined;
      let done = false;
      // Settles once; its timers stop with it, also a poll whose lookup was still in flight.
      const waiter: Waiter = (outcome) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearTimeout(poll);
        this.drop(id, waiter);
        resolve(outcome);
      };
      const timer = setTimeout(() => waiter(undefined), timeoutMs);
      const check = (delay: number) => {
        poll = setTimeout(() => {
          this.lookup(id).then(
            (record) => {
              if (done) return;
              if (record?.outcome) this.settle(id, record.outcome);
              else if (Date.now() - started < timeoutMs) check(Math.min(delay * 2, POLL_MAX_MS));
            },
            () => {
              if (!done) check(Math.min(delay * 2, POLL_MAX_MS));
            },
          );
        }, delay);
      };
      check(POLL_FIRST_MS);
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      set.add(waiter);
    });
  }

  /** Waits for an already-accepted call (idempotent retries): checks its state first. */
  async waitFor(id: string, timeoutMs: number): Promise<CallOutcome | undefined> {
    const pending = this.expect(id, timeoutMs);
    let record: CallRecord | undefined;
    try {
      record = await this.lookup(id);
    } catch (err) {
      this.cancel(id); // the request fails (503): nobody is left to read the outcome
      throw err;
    }
    if (record?.outcome) this.settle(id, record.outcome);
    return pending;
  }

  /**
   * Ends every wait for a call on this gateway, answering undefined (no outcome): for a call
   * whose request failed after the enqueue (its outcome has nobody left to read it).
   */
  forget(id: string): void {
    this.cancel(id);
  }

  /** Ends every wait for a call on this gateway, answering undefined (no outcome). */
  private cancel(id: string): void {
    const set = this.waiters.get(id);
    if (!set) return;
    this.waiters.delete(id);
    for (const waiter of set) waiter(undefined);
  }

  /**
   * A call's current record. In-flight calls live only as BullMQ jobs (the gateway writes
   * nothing else on the hot path); the worker writes the record when the call ends, and the
   * record is the only stored copy of the outcome.
   */
  async lookup(id: string): Promise<CallRecord | undefined> {
    const record = await this.store.get(id);
    // A record says everything, except for approved calls now back in the queue.
    if (record && record.status !== 'queued') return record;
    const fast = await this.lane.state(id);
    if (fast) {
      if (fast.state !== 'ended') {
        const { job } = fast;
        return {
          id,
          tool: job.tool,
          clientId: job.clientId,
          queue: 'fast',
          createdAt: job.acceptedAt,
          status: fast.state === 'active' ? 'running' : 'queued',
        };
      }
      const { stub } = fast;
      const base = {
        id,
        tool: stub.tool,
        clientId: stub.clientId,
        queue: 'fast' as const,
        createdAt: stub.acceptedAt,
      };
      if (stub.failed !== undefined) {
        return { ...base, status: 'error', outcome: failedOutcome(id, stub.tool, stub.failed) };
      }
      // Ended: its record lands within milliseconds (the worker's batch); until then, running
      // (an approved call's record says `queued` until then).
      return (await this.recordAfterGrace(id)) ?? { ...base, status: 'running' };
    }
    for (const kind of BULL_KINDS) {
      const job = await this.queues[kind].getJob(id);
      if (!job) continue;
      const data = job.data as CallJob;
      const base = {
        id,
        tool: data.tool,
        clientId: data.clientId,
        queue: kind,
        createdAt: data.acceptedAt,
      };
      const state = await job.getState();
      if (state === 'active') {
        // A sandbox call runs once its worker holds its client's lease. Taken by a worker
        // without one, it is on its way back to the queue (the client already runs its
        // share: a fairness deferral), or it has just ended and given its lease back.
        if (kind !== 'sandbox') return { ...base, status: 'running' };
        const leased = await this.connection.zscore(this.keys.running(data.clientId, kind), id);
        if (leased !== null) return { ...base, status: 'running' };
        return (await this.recordAfterGrace(id)) ?? { ...base, status: 'queued' };
      }
      if (state === 'failed')
        return {
          ...base,
          status: 'error',
          outcome: failedOutcome(id, data.tool, job.failedReason),
        };
      if (state === 'completed') {
        // The worker's record write is batched (≤ 10 ms behind the completion): wait for it
        // once; still missing, the call reads as running and the next read finds it.
        return (await this.recordAfterGrace(id)) ?? { ...base, status: 'running' };
      }
      return { ...base, status: 'queued' };
    }
    // Finished between the two reads (or approved and not yet enqueued).
    return (await this.store.get(id)) ?? record;
  }

  /**
   * A queued or running call's brief from its job without reading the job's arguments (a
   * listing reads bounded bytes per call): the job's name (its tool), add time and state.
   * Undefined when no queue holds the call.
   */
  async peek(id: string, clientId: string): Promise<CallBrief | undefined> {
    const fast = await this.lane.brief(id);
    if (fast) {
      const base = { id, tool: fast.tool, clientId, createdAt: fast.acceptedAt };
      if (fast.state === 'failed') return { ...base, status: 'error', errorCode: 'worker_error' };
      // Ended: its record lands within milliseconds; until then it reads as running.
      return { ...base, status: fast.state === 'waiting' ? 'queued' : 'running' };
    }
    for (const kind of BULL_KINDS) {
      const [tool, timestamp] = await this.connection.hmget(
        this.keys.bullJob(kind, id),
        'name',
        'timestamp',
      );
      if (tool === null || tool === undefined) continue;
      const state = await this.queues[kind].getJobState(id);
      const base = { id, tool, clientId, createdAt: Number(timestamp) };
      if (state === 'failed') return { ...base, status: 'error', errorCode: 'worker_error' };
      // Completed: its record lands within milliseconds; until then it reads as running.
      if (state === 'completed') return { ...base, status: 'running' };
      if (state !== 'active') return { ...base, status: 'queued' };
      // Active sandbox calls run once they hold their client's lease (see lookup).
      const leased = await this.connection.zscore(this.keys.running(clientId, kind), id);
      return { ...base, status: leased === null ? 'queued' : 'running' };
    }
    return undefined;
  }

  /** A call's final record, read once more after RECORD_GRACE_MS if it is not there yet. */
  private async recordAfterGrace(id: string): Promise<CallRecord | undefined> {
    // An approved call's record says `queued` until its end lands: not the one waited for.
    const landed = (record: CallRecord | undefined) =>
      record && record.status !== 'queued' ? record : undefined;
    return (
      landed(await this.store.get(id)) ??
      landed(
        await new Promise((r) => setTimeout(r, RECORD_GRACE_MS)).then(() => this.store.get(id)),
      )
    );
  }

  /**
   * Takes a call that has not started out of its queue (waiting, prioritized or put back).
   * Returns its job, or undefined when there was none to take: running (its lock makes
   * BullMQ refuse), finished, or not a queued call.
   */
  async removeWaiting(id: string): Promise<{ job: CallJob; kind: QueueKind } | undefined> {
    const fast = await this.lane.remove(id);
    if (fast) return { job: fast, kind: 'fast' };
    for (const kind of BULL_KINDS) {
      const job = await this.queues[kind].getJob(id);
      if (!job) continue;
      const state = await job.getState();
      if (state !== 'waiting' && state !== 'prioritized' && state !== 'delayed') return undefined;
      try {
        await job.remove();
      } catch {
        return undefined; // a worker took it in between
      }
      return { job: job.data as CallJob, kind };
    }
    return undefined;
  }

  /** Closes the queues and the reply subscription; bounded, since a close waits for a connection that may never come. */
  async close(timeoutMs = 3000): Promise<void> {
    this.replies.disconnect();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise((r) => (timer = setTimeout(r, timeoutMs)));
    // A queue still connecting (a Cluster loads its slots first) reports a failed start as an
    // 'error' event; closed first, it has no listener left then, and the event becomes an
    // unhandled rejection that ends the process. Let the start settle, then close.
    const queues = Object.values(this.queues);
    await Promise.race([Promise.allSettled(queues.map((q) => q.waitUntilReady())), deadline]);
    const closing = Promise.allSettled(
      queues.map((q) => q.close().finally(() => keepErrorListener(q))),
    );
    await Promise.race([closing, deadline]);
    clearTimeout(timer);
    for (const q of Object.values(this.queues)) void q.disconnect().catch(() => undefined);
  }

  private settle(id: string, outcome: CallOutcome): void {
    const set = this.waiters.get(id);
    if (!set) return;
    this.waiters.delete(id);
    for (const waiter of set) waiter(outcome);
  }

  private drop(id: string, waiter: Waiter): void {
    const set = this.waiters.get(id);
    set?.delete(waiter);
    if (set?.size === 0) this.waiters.delete(id);
  }
}

function parseOutcome(value: unknown): CallOutcome {
  return (typeof value === 'string' ? JSON.parse(value) : value) as CallOutcome;
}

/** A job BullMQ gave up on (its worker died twice, or threw outside the tool). */
export function failedOutcome(id: string, tool: string, reason: string | undefined): CallOutcome {
  return {
    id,
    tool,
    status: 'error',
    error: {
      code: 'worker_error',
      message: `the call could not be completed: ${reason ?? 'worker failure'}`,
    },
    durationMs: 0,
    cached: false,
  };
}

/**
 * BullMQ's RedisConnection drops every listener when it closes, and a start that fails after
 * that (an untrusted TLS certificate, a cluster that never loaded its slots) emits 'error' with
 * none left: an uncaught exception. One listener that stays absorbs it.
 */
function keepErrorListener(queue: Queue): void {
  (queue as unknown as { connection?: EventEmitter }).connection?.on('error', () => undefined);
}
