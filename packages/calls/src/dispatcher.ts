import { Queue, QueueEvents } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Keys } from './keys.js';
import type { CallStore } from './store.js';
import type { CallJob, CallOutcome, CallRecord, QueueKind } from './types.js';

const KINDS: QueueKind[] = ['fast', 'sandbox'];

type Waiter = (outcome: CallOutcome) => void;

/**
 * The gateway's side of the queue: enqueues calls and waits for their outcomes. One
 * QueueEvents reader per queue fans completion events out to waiting requests by call id.
 */
export class Dispatcher {
  private readonly queues: Record<QueueKind, Queue>;
  private readonly events: Record<QueueKind, QueueEvents>;
  private readonly waiters = new Map<string, Set<Waiter>>();

  constructor(
    connection: Redis,
    /** Makes a blocking connection; each queue's event reader needs its own. */
    eventsConnection: () => Redis,
    private readonly keys: Keys,
    private readonly store: CallStore,
  ) {
    const make = <T>(fn: (kind: QueueKind) => T) =>
      Object.fromEntries(KINDS.map((k) => [k, fn(k)])) as Record<QueueKind, T>;
    this.queues = make(
      (kind) => new Queue(keys.queue(kind), { connection, prefix: keys.bullPrefix }),
    );
    this.events = make((kind) => {
      const events = new QueueEvents(keys.queue(kind), {
        connection: eventsConnection(),
        prefix: keys.bullPrefix,
      });
      events.on('completed', ({ jobId, returnvalue }) =>
        this.settle(jobId, parseOutcome(returnvalue)),
      );
      events.on('failed', ({ jobId, failedReason }) => this.settleFailed(jobId, failedReason));
      // Errors surface through /readyz and request failures; keep the process alive.
      events.on('error', () => undefined);
      return events;
    });
    for (const q of Object.values(this.queues)) q.on('error', () => undefined);
  }

  /** Resolves once every event reader is connected; false if that takes over `timeoutMs`. */
  async ready(timeoutMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>(
      (resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)),
    );
    const ready = Promise.all(Object.values(this.events).map((e) => e.waitUntilReady())).then(
      () => true,
    );
    try {
      return await Promise.race([ready, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  queue(kind: QueueKind): Queue {
    return this.queues[kind];
  }

  async enqueue(job: CallJob, kind: QueueKind): Promise<void> {
    await this.queues[kind].add(job.tool, job, {
      jobId: job.id,
      // Kept briefly so a call's outcome is readable while the worker writes its record.
      removeOnComplete: { age: 30, count: 20_000 },
      removeOnFail: { age: 3600 },
    });
  }

  /**
   * Resolves with the call's outcome, or undefined after `timeoutMs`. Register with
   * `expect(id)` before enqueueing so a fast completion is never missed.
   */
  expect(id: string, timeoutMs: number): Promise<CallOutcome | undefined> {
    return new Promise((resolve) => {
      const waiter: Waiter = (outcome) => {
        clearTimeout(timer);
        resolve(outcome);
      };
      const timer = setTimeout(() => {
        this.drop(id, waiter);
        resolve(undefined);
      }, timeoutMs);
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      set.add(waiter);
    });
  }

  /** Waits for an already-accepted call (idempotent retries, approvals): checks the store first. */
  async waitFor(id: string, timeoutMs: number): Promise<CallOutcome | undefined> {
    const pending = this.expect(id, timeoutMs);
    const record = await this.store.get(id);
    if (record?.outcome) this.settle(id, record.outcome);
    return pending;
  }

  /**
   * A call's current record. In-flight calls live only as BullMQ jobs (the gateway writes
   * nothing else on the hot path); the worker writes the record when the call ends.
   */
  async lookup(id: string): Promise<CallRecord | undefined> {
    const record = await this.store.get(id);
    // A record says everything, except for approved calls now back in the queue.
    if (record && record.status !== 'queued') return record;
    for (const kind of KINDS) {
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
      if (state === 'active') return { ...base, status: 'running' };
      if (state === 'failed')
        return {
          ...base,
          status: 'error',
          outcome: failedOutcome(id, data.tool, job.failedReason),
        };
      if (state === 'completed') {
        const recorded = await this.store.get(id);
        if (recorded) return recorded;
        const outcome = parseOutcome(job.returnvalue);
        return { ...base, status: outcome.status, outcome };
      }
      return { ...base, status: 'queued' };
    }
    // Finished between the two reads (or approved and not yet enqueued).
    return (await this.store.get(id)) ?? record;
  }

  /** Closes the queues and event readers; bounded, since a close waits for a connection that may never come. */
  async close(timeoutMs = 3000): Promise<void> {
    const closing = Promise.allSettled([
      ...Object.values(this.events).map((e) => e.close()),
      ...Object.values(this.queues).map((q) => q.close()),
    ]);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([closing, new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    for (const e of Object.values(this.events)) void e.disconnect().catch(() => undefined);
    for (const q of Object.values(this.queues)) void q.disconnect().catch(() => undefined);
  }

  private settle(id: string, outcome: CallOutcome): void {
    const set = this.waiters.get(id);
    if (!set) return;
    this.waiters.delete(id);
    for (const waiter of set) waiter(outcome);
  }

  private async settleFailed(id: string, reason: string): Promise<void> {
    if (!this.waiters.has(id)) return;
    const record = await this.store.get(id).catch(() => undefined);
    this.settle(id, record?.outcome ?? failedOutcome(id, record?.tool ?? 'unknown', reason));
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
