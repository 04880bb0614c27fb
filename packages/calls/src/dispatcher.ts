import { randomUUID } from 'node:crypto';
import type { RedisClient } from './redis.js';
import type { Keys, QueueName } from './keys.js';
import type { CallStore } from './store.js';
import { CallQueue, briefCall, endedStub, type Admit } from './call-queue.js';
import type { QueueOptions } from 'bullmq';
import { Upkeep } from './upkeep.js';
import type { CallBrief, CallJob, CallOutcome, CallRecord, QueueKind } from './types.js';

/**
 * Fallback checks of a waited-for call, at 1, 3, 7, 12, 17… s: one round trip of two reads
 * each (see `ended`). Every end of a call publishes its reply (a worker's RELEASE, a failed
 * call's too, a stalled-twice failure, a cancel in the queue), so a reply is lost only with the reply
 * subscriber's connection: a check reads Redis only if that connection was down, or came up,
 * since REPLY_UNSURE_MS before the wait began (ioredis subscribes again once it is up), or if
 * the reply goes to another gateway's channel (an idempotent retry: `waitFor`).
 */
const POLL_FIRST_MS = 1000;
const REPLY_UNSURE_MS = 5000;
const POLL_MAX_MS = 5000;
/** Bytes of an ended stub the fallback poll reads. */
const STUB_BYTES = 2048;
/** Session queues (one per worker hosting sessions) whose BullMQ Queue this gateway keeps open. */
const SESSION_QUEUES_KEPT = 64;
/** How long `lookup` waits once for the record of a call that just ended. */
const RECORD_GRACE_MS = 25;

/** Settles one wait: with the outcome, or undefined (timed out, cancelled). */
type Waiter = (outcome: CallOutcome | undefined) => void;

/**
 * The gateway's side of the queue: enqueues calls and waits for their outcomes. Workers
 * publish each outcome on the waiting gateway's own channel (`replyTo` in the job), so a
 * result travels in one hop; a slow poll of the job's state backs that up.
 */
export class Dispatcher {
  /** The shared queues (BullMQ), each call admitted by a script before its add. */
  readonly queues: Record<QueueKind, CallQueue>;
  /** Workers' session queues this gateway added to lately (oldest first). */
  private readonly sessionQueues = new Map<string, CallQueue>();
  /** When a client's in-flight set last got its pruning and expiry (once a second is enough). */
  private readonly upkeep = new Upkeep(1000);
  private readonly waiters = new Map<string, Set<Waiter>>();
  private readonly readyWaiters = new Set<() => void>();
  /** Where workers publish the outcomes this gateway waits for. */
  readonly replyChannel: string;
  private readonly replies: RedisClient;
  private subscribed: Promise<unknown>;
  /** When the reply subscriber's connection last came up or went down. */
  private repliesChangedAt = Date.now();

  constructor(
    private readonly connection: RedisClient,
    /** The subscriber connection for replies (a blocking one: it reconnects forever). */
    subscriber: RedisClient,
    private readonly keys: Keys,
    private readonly store: CallStore,
    /** BullMQ's telemetry (bullmq-otel), so a call's add joins its trace. */
    private readonly telemetry?: QueueOptions['telemetry'],
  ) {
    this.queues = {
      fast: new CallQueue(connection, keys, 'fast', 'fast', telemetry),
      sandbox: new CallQueue(connection, keys, 'sandbox', 'sandbox', telemetry),
    };
    this.replyChannel = keys.reply(randomUUID());
    this.replies = subscriber;
    this.replies.on('message', (channel: string, message: string) => {
      // The connection also carries other channels (call events).
      if (channel !== this.replyChannel) return;
      const outcome = parseOutcome(message);
      this.settle(outcome.id, outcome);
    });
    this.replies.on('ready', () => {
      this.repliesChangedAt = Date.now();
      for (const onReady of [...this.readyWaiters]) onReady();
    });
    this.replies.on('close', () => {
      this.repliesChangedAt = Date.now();
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

  /** Calls waiting, put back for a moment (delayed) and held by workers in one queue. */
  async counts(
    kind: QueueKind,
  ): Promise<{ waiting: number; active: number; delayed: number; failed: number }> {
    return this.queues[kind].counts();
  }

  /**
   * A call admitted against the client's `limit` of calls in flight (0: never refused, for
   * approved calls) and added to its queue at its fair place (CallQueue).
   */
  async enqueue(
    job: CallJob,
    kind: QueueKind,
    limit: number,
    staleAfterMs: number,
    /** The user's own limit (`limits.perUser.queued`) for a call made for a user. */
    userLimit?: number,
    /** A session's call: the worker hosting the session, whose own queue takes it. */
    host?: string,
  ): Promise<Admit> {
    await this.subscribed;
    try {
      const upkeep = this.upkeep.due(job.clientId);
      const queue = host === undefined ? this.queues[kind] : this.sessionQueue(host);
      return await queue.enqueue(job, limit, staleAfterMs, upkeep, userLimit);
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
    return this.wait(id, timeoutMs, false);
  }

  /**
   * `expect`, where `anyReply` says the call's reply goes to another channel (a retry on a
   * call another request started, perhaps on another gateway): its checks always read Redis.
   */
  private wait(id: string, timeoutMs: number, anyReply: boolean): Promise<CallOutcome | undefined> {
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
      /** Whether a reply for this call may have been lost (see REPLY_UNSURE_MS). */
      const unsure = () =>
        anyReply ||
        this.replies.status !== 'ready' ||
        this.repliesChangedAt >= started - REPLY_UNSURE_MS;
      const check = (delay: number) => {
        poll = setTimeout(() => {
          if (!unsure()) {
            if (Date.now() - started < timeoutMs) check(Math.min(delay * 2, POLL_MAX_MS));
            return;
          }
          this.ended(id).then(
            (outcome) => {
              if (done) return;
              if (outcome) this.settle(id, outcome);
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
    // Its reply goes to the gateway that sent the call first, maybe another: checks read Redis.
    const pending = this.wait(id, timeoutMs, true);
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
   * A call's current record. In-flight calls live only as jobs in their queue (the gateway
   * writes nothing else on the hot path); the worker writes the record when the call ends, and
   * the record is the only stored copy of the outcome.
   */
  lookup(id: string): Promise<CallRecord | undefined> {
    return this.find(id, false);
  }

  /** `lookup`, `again` once when the call ended between its reads. */
  private async find(id: string, again: boolean): Promise<CallRecord | undefined> {
    const record = await this.store.get(id);
    // A record says everything, except for approved calls now back in the queue.
    if (record && record.status !== 'queued') return record;
    const found = await briefCall(this.connection, this.keys, id);
    if (!found) {
      // Finished between the two reads (or approved and not yet enqueued).
      return (await this.store.get(id)) ?? record;
    }
    if ('ended' in found) {
      const stub = found.ended;
      const base = {
        id,
        tool: stub.tool,
        clientId: stub.clientId,
        ...(stub.user === undefined ? {} : { user: stub.user }),
        queue: stub.queue,
        createdAt: stub.acceptedAt,
      };
      if (stub.failed !== undefined) {
        return { ...base, status: 'error', outcome: failedOutcome(id, stub.tool, stub.failed) };
      }
      // Ended: its record lands within milliseconds (the worker's batch); until then,
      // running (an approved call's record says `queued` until then).
      return (await this.recordAfterGrace(id)) ?? { ...base, status: 'running' };
    }
    const kind: QueueKind = found.queue === 'fast' ? 'fast' : 'sandbox';
    const state = await this.queueNamed(found.queue).state(id);
    // Ended between the two reads: its stub is in now (a worker releases a call before its job
    // completes), its record perhaps not yet.
    if (!state || state.state === 'ended') {
      return again ? ((await this.store.get(id)) ?? record) : this.find(id, true);
    }
    const { job } = state;
    const base = {
      id,
      tool: job.tool,
      clientId: job.clientId,
      ...(job.user === undefined ? {} : { user: job.user }),
      queue: kind,
      createdAt: job.acceptedAt,
    };
    if (state.state === 'waiting') return { ...base, status: 'queued' };
    // A sandbox call runs once its worker holds its client's lease (a session's call, once
    // its worker holds it). Held by a worker without one, it is on its way back to the queue
    // (the client already runs its share: a fairness deferral), or it has just ended and given
    // its lease back.
    if (kind === 'fast' || job.session) return { ...base, status: 'running' };
    const leased = await this.connection.zscore(this.keys.running(job.clientId, kind), id);
    if (leased !== null) return { ...base, status: 'running' };
    return (await this.recordAfterGrace(id)) ?? { ...base, status: 'queued' };
  }

  /**
   * The outcome of a call that has ended, else undefined: what a waiting gateway's fallback
   * poll needs, in one round trip of two reads (its record, the head of its ended stub), where
   * `lookup` takes several for a call still running.
   */
  async ended(id: string): Promise<CallOutcome | undefined> {
    const [[, text], [, head]] = (await this.connection
      .pipeline()
      .get(this.keys.call(id))
      .getrange(this.keys.ended(id), 0, STUB_BYTES - 1)
      .exec()) as [[unknown, string | null], [unknown, string]];
    const record = text ? (JSON.parse(text) as CallRecord) : undefined;
    if (record?.outcome && record.status !== 'queued') return record.outcome;
    if (!head) return undefined;
    const stub = endedStub(head);
    // Cut short (a long reason): the full read says.
    if (!stub) return (await this.lookup(id))?.outcome;
    if (stub.failed !== undefined) return failedOutcome(id, stub.tool, stub.failed);
    return undefined;
  }

  /**
   * A queued or running call's brief from its job without reading the job's arguments (a
   * listing reads bounded bytes per call): its tool, accept time and state. Undefined when no
   * queue holds the call.
   */
  async peek(id: string, clientId: string): Promise<CallBrief | undefined> {
    const found = await briefCall(this.connection, this.keys, id);
    if (!found) return undefined;
    const { tool, user, acceptedAt } = 'ended' in found ? found.ended : found.brief;
    const base = {
      id,
      tool,
      clientId,
      ...(user === undefined ? {} : { user }),
      createdAt: acceptedAt,
    };
    if ('ended' in found) {
      if (found.ended.failed === undefined) {
        // Ended: its record lands within milliseconds; until then it reads as running.
        return { ...base, status: 'running' };
      }
      const { error } = failedOutcome(id, tool, found.ended.failed);
      return { ...base, status: 'error', errorCode: error?.code ?? 'worker_error' };
    }
    if (found.brief.state === 'waiting') return { ...base, status: 'queued' };
    if (found.queue !== 'sandbox') return { ...base, status: 'running' };
    // Held by a sandbox worker: running once it holds its client's lease (see lookup).
    const leased = await this.connection.zscore(this.keys.running(clientId, 'sandbox'), id);
    return { ...base, status: leased === null ? 'queued' : 'running' };
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
   * Takes a call that has not started out of its queue (waiting or put back). Returns its job,
   * or undefined when there was none to take: held by a worker, finished, or not a queued call.
   */
  async removeWaiting(id: string): Promise<{ job: CallJob; kind: QueueKind } | undefined> {
    const found = await briefCall(this.connection, this.keys, id);
    if (!found || 'ended' in found || found.brief.state !== 'waiting') return undefined;
    const queue = this.queueNamed(found.queue);
    const job = await queue.remove(id);
    return job ? { job, kind: queue.kind } : undefined;
  }

  /** A queue by its BullMQ name: a shared one, or a worker's session queue. */
  private queueNamed(name: QueueName): CallQueue {
    if (name === 'fast' || name === 'sandbox') return this.queues[name];
    return this.sessionQueue(name.slice('sessions-'.length));
  }

  /** A worker's session queue, kept open for the next calls (a few dozen at most). */
  private sessionQueue(host: string): CallQueue {
    const name = this.keys.sessionQueue(host);
    let queue = this.sessionQueues.get(name);
    if (queue) {
      this.sessionQueues.delete(name);
    } else {
      queue = new CallQueue(this.connection, this.keys, 'sandbox', name, this.telemetry);
      for (const [old, q] of this.sessionQueues) {
        if (this.sessionQueues.size < SESSION_QUEUES_KEPT) break;
        this.sessionQueues.delete(old);
        void q.close().catch(() => undefined);
      }
    }
    this.sessionQueues.set(name, queue);
    return queue;
  }

  /** Closes the reply subscription. */
  async close(): Promise<void> {
    this.replies.disconnect();
    await Promise.all(
      [...Object.values(this.queues), ...this.sessionQueues.values()].map((q) =>
        q.close().catch(() => undefined),
      ),
    );
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

/** A failed stub's reason that names its own code: a lost session's call (`session_lost: …`). */
const OWN_CODE = /^(session_lost): ([\s\S]+)$/;

/**
 * A call its queue gave up on (its workers died twice, or it threw outside the tool), or a
 * lost session's call (its reason keeps its code, as in the reply its gateway was sent).
 */
export function failedOutcome(id: string, tool: string, reason: string | undefined): CallOutcome {
  const own = reason === undefined ? null : OWN_CODE.exec(reason);
  return {
    id,
    tool,
    status: 'error',
    error: own
      ? { code: own[1]!, message: own[2]! }
      : {
          code: 'worker_error',
          message: `the call could not be completed: ${reason ?? 'worker failure'}`,
        },
    durationMs: 0,
    cached: false,
  };
}
