import { randomUUID } from 'node:crypto';
import {
  Job,
  SpanKind,
  TelemetryAttributes,
  UnrecoverableError,
  Worker,
  trace,
  type JobJson,
  type QueueOptions,
} from 'bullmq';
import {
  failedOutcome,
  outcomeEvent,
  type BudgetCharges,
  type CallJob,
  type CallQueue,
  type OutcomeEvent,
  type RedisClient,
} from '@toolgate/calls';
import type { Logger } from '@toolgate/log';
import { SlotPool } from './slot-pool.js';

/** How long an idle consumer blocks for new calls before it looks again (seconds). */
const DRAIN_DELAY_S = 1;
/** How long a fetch may take before it counts as hung (see QueueConsumer.fetch). */
const FETCH_STUCK_MS = 8000;
/** How long a stop waits for a fetch still blocked once BullMQ's worker is closed. */
const STOP_FETCH_WAIT_MS = 2000;
/** Why BullMQ failed a call whose workers stopped twice while running it. */
const STALLED_TWICE = 'its workers stopped twice while running it';

/** A slot's hold on its pool's slot: `given` once handed back before its call left. */
interface SlotHold {
  given: boolean;
}

/** A call a worker took from its queue: the call, and its history. */
export interface QueuedCall {
  job: CallJob;
  /** How often a dead worker's lapsed lock handed the call out again (BullMQ's stalled count). */
  restarts: number;
  /** How often it was put back for fairness (or by the reserve slot). */
  deferrals: number;
  /**
   * Sandbox calls: who cancelled it before it was taken (its cancel marker), or null.
   * Undefined for fast calls (the worker goes by the cancels it heard).
   */
  cancelledBy?: string | null;
}

/**
 * Ends a call: toolgate's release (its end recorded, the waiting gateway told) and BullMQ's
 * completion, which takes the slot's next call. `publish` false: the outcome goes out with the
 * call's record instead.
 */
export type CallEnd = (
  end: OutcomeEvent,
  publish: boolean,
  /** What the call spent of its budgets, charged with its end (docs/budgets.md). */
  charges?: BudgetCharges,
) => Promise<void>;

/** What a slot hands the code that runs its call: the two ways a call leaves the slot. */
export interface CallSlot {
  end: CallEnd;
  /** Puts the call back in its queue for `delayMs` (its client runs its share already). */
  defer(delayMs: number): Promise<void>;
}

export interface QueueConsumerOptions {
  queue: CallQueue;
  /**
   * The connection BullMQ's worker shares (with `maxRetriesPerRequest: null`, as BullMQ wants);
   * it makes one more for its blocking wait.
   */
  connection: RedisClient;
  /** This worker's id: BullMQ's worker name and the start of each lock's token. */
  workerId: string;
  /**
   * How many calls run at once: a number of this consumer's own, or a pool it shares with the
   * worker's consumers of the same kind on other shards.
   */
  slots: number | SlotPool;
  /** A held call's lock: renewed every third of it; a lapsed one is a dead worker's. */
  lockMs: number;
  /** How often BullMQ's stalled-job check runs (any worker's check serves the queue). */
  stalledEveryMs: number;
  /** The cancel markers' key for a call id, read when a call is taken (sandbox calls). */
  cancelMarker?: (id: string) => string;
  telemetry?: QueueOptions['telemetry'];
  log: Logger;
  /** Runs one call (or puts it back); resolves once the call has left the slot. */
  handle(call: QueuedCall, slot: CallSlot): Promise<void>;
  /** BullMQ's stalled check handed out calls of a dead worker. */
  onLost?: () => void;
}

/**
 * BullMQ's Worker, for manual processing: the next job a completion took (`fetchNext`) goes
 * through the worker's own `nextJobFromJobData`, as in `Worker.run`. Above all, a completion that
 * found the queue empty marks the worker drained, so its next `getNextJob` blocks until a call
 * arrives rather than first asking Redis once more for nothing (one script and an event per call
 * when calls come one at a time).
 */
class CallWorker extends Worker {
  nextOf(moved: unknown, token: string): Promise<Job | undefined> {
    const [raw, id] = Array.isArray(moved) ? (moved as [JobJson | undefined, string]) : [];
    return this.nextJobFromJobData(raw, id, token);
  }
}

/**
 * A worker's consumer of one BullMQ queue, by BullMQ's manual processing: `slots` slots; a
 * slot's call ends with `moveToCompleted(…, fetchNext)`, which takes the slot's next call in the
 * same script, and an idle consumer blocks in `getNextJob`. Like BullMQ's own `Worker.run`, it
 * renews every held call's lock in one batched command, runs BullMQ's stalled-job check, and
 * fails a job that comes back with a deferred failure (stalled more than `maxStalledCount`).
 */
export class QueueConsumer {
  private worker: CallWorker;
  private readonly pool: SlotPool;
  /** Calls held here: id → lock token. */
  private readonly held = new Map<string, string>();
  private readonly slots = new Set<Promise<void>>();
  private stopping = false;
  /** Resolves when `stop` begins: a call waiting for a slot goes back to its queue. */
  private readonly stopped: Promise<void>;
  private stop_: () => void = () => undefined;
  /** A call this consumer took that waits for a slot (a shared pool's). */
  private waitingCall: { job: Job; token: string } | undefined;
  /** The last fetch (the loop's, or an end's) found the queue empty. */
  private drained = false;
  private loopDone: Promise<void> | undefined;
  private renewTimer: NodeJS.Timeout | undefined;
  private tokens = 0;
  private readonly tokenBase = randomUUID().slice(0, 8);

  constructor(private readonly o: QueueConsumerOptions) {
    this.pool = typeof o.slots === 'number' ? new SlotPool(o.slots) : o.slots;
    this.stopped = new Promise((resolve) => (this.stop_ = resolve));
    this.worker = this.newWorker();
  }

  /** BullMQ's worker for this queue (manual processing: no processor, never `run`). */
  private newWorker(): CallWorker {
    const { o } = this;
    const worker = new CallWorker(o.queue.name, null, {
      connection: o.connection,
      prefix: o.queue.queue.opts.prefix,
      name: o.workerId,
      lockDuration: o.lockMs,
      stalledInterval: o.stalledEveryMs,
      // A call stalled once is handed out again (an idempotent tool runs again, any other
      // ends worker_lost); stalled twice, BullMQ fails it.
      maxStalledCount: 1,
      drainDelay: DRAIN_DELAY_S,
      autorun: false,
      // No telemetry on the worker itself: its idle fetches and stalled checks would be a span
      // each every second. Each call's run is one consumer span (below).
    });
    worker.on('error', (err) =>
      o.log.warn({ err: err.message, queue: o.queue.name }, 'queue error'),
    );
    worker.on('stalled', (callId) => {
      o.log.warn({ callId, queue: o.queue.name }, 'call of a dead worker moved on');
      o.onLost?.();
    });
    return worker;
  }

  /**
   * BullMQ's `getNextJob`, watched: after a Redis Cluster failover a fetch was seen to hang
   * for good (its blocking connection never came back), leaving calls queued with every slot
   * free. A fetch that has not settled in FETCH_STUCK_MS (BullMQ's own wait is ~2 s) is given
   * up: a new BullMQ worker (with a new blocking connection) takes over, the old one is
   * closed, and a call the abandoned fetch takes after all still runs here.
   */
  private async fetch(token: string): Promise<Job | undefined> {
    const worker = this.worker;
    const fetching = worker.getNextJob(token, { block: true });
    let result: Job | undefined | 'stuck';
    do {
      let timer: NodeJS.Timeout | undefined;
      const stuck = new Promise<'stuck'>((resolve) => {
        timer = setTimeout(() => resolve('stuck'), FETCH_STUCK_MS);
      });
      result = await Promise.race([fetching, stuck]).finally(() => clearTimeout(timer));
      // While Redis itself is away a fetch waits, as every command does: a new worker would
      // wait the same (a 60 s outage made fourteen of them).
    } while (result === 'stuck' && this.o.connection.status !== 'ready' && !this.stopping);
    if (result !== 'stuck') return result;
    this.o.log.warn(
      { queue: this.o.queue.name, afterMs: FETCH_STUCK_MS },
      'a fetch hung (a connection a failover left behind): a new BullMQ worker takes over',
    );
    this.worker = this.newWorker();
    if (!this.stopping) void this.worker.startStalledCheckTimer();
    void worker.close(true).catch(() => undefined);
    fetching.then(
      (late) => {
        // Taken again through the worker now in charge: a job keeps its worker, and the
        // closed one's connections never come back (its completion waited for them for good).
        if (!late) return;
        this.pool.force();
        this.adopt(Job.fromJSON(this.worker, late.asJSON(), late.id), token);
      },
      () => undefined,
    );
    return undefined;
  }

  /** Runs a call in the pool's slot it was given (the loop's calls, and a late fetch's). */
  private adopt(job: Job, token: string): void {
    const hold: SlotHold = { given: false };
    const slot: Promise<void> = this.slot(job, token, hold).finally(() => {
      this.slots.delete(slot);
      if (!hold.given) this.pool.release();
    });
    this.slots.add(slot);
  }

  /** Resolves once BullMQ's connections are up. */
  async ready(): Promise<void> {
    await this.worker.waitUntilReady();
  }

  start(): void {
    const { log, lockMs } = this.o;
    void this.worker.startStalledCheckTimer();
    this.loopDone = this.loop();
    this.renewTimer = setInterval(
      () => {
        if (this.held.size === 0) return;
        const ids = [...this.held.keys()];
        this.worker.extendJobLocks(ids, [...this.held.values()], lockMs).then(
          (lost) => {
            if (lost.length > 0) log.warn({ calls: lost, queue: this.o.queue.name }, 'locks lost');
          },
          (err: unknown) =>
            log.warn(
              { err: (err as Error).message, queue: this.o.queue.name },
              'could not renew locks',
            ),
        );
      },
      Math.max(100, Math.round(lockMs / 3)),
    );
  }

  /**
   * Stops taking calls and waits for the ones held here (their ends take no next call), then
   * closes BullMQ's worker at once: that ends a fetch still blocked on the queue's marker
   * (perhaps on a connection to a master that is gone), whose call, if it took one, runs too.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.renewTimer);
    this.pool.wake(this);
    this.stop_();
    const waiting = this.waitingCall;
    if (waiting) {
      // Not run here: back to its queue for another worker, before BullMQ's worker closes.
      this.waitingCall = undefined;
      if (!this.pool.withdraw(this)) this.pool.release();
      this.held.delete(waiting.job.id!);
      await waiting.job.moveToDelayed(Date.now() + 1, waiting.token).catch(() => undefined);
    }
    await Promise.all(this.slots);
    await this.worker.close(true);
    // A blocked fetch ends with its connection; one stuck in a Cluster client's reconnection
    // (seen after a failover) may not: it takes no call once the worker is closed, so it is
    // left behind rather than holding the shutdown.
    const ended = await Promise.race([
      this.loopDone?.then(() => true),
      new Promise<false>((r) => setTimeout(() => r(false), STOP_FETCH_WAIT_MS).unref()),
    ]);
    if (!ended)
      this.o.log.warn({ queue: this.o.queue.name }, 'a blocked fetch outlived its worker');
    await Promise.all(this.slots);
  }

  /** Takes calls for the free slots; BullMQ blocks while the queue is empty. */
  private async loop(): Promise<void> {
    const { log } = this.o;
    /** Whether the last fetch failed: one warning per outage, not one per retry. */
    let failing = false;
    while (!this.stopping) {
      if (this.pool.free <= 0) {
        await this.pool.whenFree(this);
        continue;
      }
      const token = this.token();
      let job: Job | undefined;
      try {
        job = await this.fetch(token);
      } catch (err) {
        if (!failing) {
          log.warn(
            { err: (err as Error).message, queue: this.o.queue.name },
            'could not take calls; trying again',
          );
        }
        failing = true;
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
      if (failing) log.info({ queue: this.o.queue.name }, 'taking calls again');
      failing = false;
      this.drained = !job;
      if (!job) continue;
      // Taken while another shard's consumer filled the last slot: it waits for the next one
      // freed, its lock renewed meanwhile.
      const waiting = this.pool.take(this);
      if (waiting) {
        this.held.set(job.id!, token);
        this.waitingCall = { job, token };
        const granted = await Promise.race([
          waiting.then(() => true),
          this.stopped.then(() => false),
        ]);
        // Stopping: `stop` puts it back.
        if (!granted || !this.waitingCall) return;
        this.waitingCall = undefined;
      }
      this.adopt(job, token);
    }
  }

  /**
   * A call's end on a shared pool: should its shard's Redis go (or be gone), its slot goes back
   * to the pool at once: the tool is done, only the end waits, for as long as the shard is down,
   * and the other shards' calls should not wait with it.
   */
  private async givingUpIfDown(ending: Promise<void>, hold: SlotHold): Promise<void> {
    if (!this.pool.shared) return ending;
    const connection = this.o.connection;
    const giveBack = () => {
      if (hold.given) return;
      hold.given = true;
      this.pool.release();
    };
    if (connection.status !== 'ready') giveBack();
    connection.once('close', giveBack);
    try {
      await ending;
    } finally {
      connection.off('close', giveBack);
    }
  }

  private token(): string {
    return `${this.o.workerId}:${this.tokenBase}:${this.tokens++}`;
  }

  /** Runs calls in one slot, each call's completion taking the next waiting one. */
  private async slot(first: Job, token: string, hold: SlotHold): Promise<void> {
    let next: Job | undefined = first;
    while (next) {
      const job: Job = next;
      next = undefined;
      this.held.set(job.id!, token);
      try {
        // BullMQ's consumer span (bullmq-otel, BullMQ's own `trace`), a child of the add's:
        // one trace per call.
        next = await trace(
          this.o.telemetry,
          SpanKind.CONSUMER,
          this.o.queue.name,
          'process',
          this.o.queue.name,
          (span) => {
            span?.setAttributes({
              [TelemetryAttributes.JobId]: job.id!,
              [TelemetryAttributes.JobName]: job.name,
              [TelemetryAttributes.WorkerName]: this.o.workerId,
            });
            return this.run(job, token, hold);
          },
          job.opts.telemetry?.metadata,
        );
      } finally {
        this.held.delete(job.id!);
      }
    }
  }

  /** Runs one call; the next job when its end took one. */
  private async run(job: Job, token: string, hold: SlotHold): Promise<Job | undefined> {
    const { log, queue } = this.o;
    const data = job.data as CallJob;
    /**
     * Whether a call's end should take the next one in the same script (BullMQ's `fetchNext`):
     * unless the last fetch found the queue empty. Then the consumer's loop waits on the queue's
     * marker and takes the next call itself, and an end's fetch would find nothing (a dozen
     * commands for nothing when calls come one at a time). Nor while another shard's consumer
     * waits for one of the slots this one shares with it: the slot goes there instead.
     */
    const fetchNext = () => !this.stopping && !this.drained && !this.pool.contended(this);
    let next: Job | undefined;
    let settled = false;
    const fail = async (reason: string) => {
      const outcome = failedOutcome(data.id, data.tool, reason);
      await queue
        .release(
          data,
          { json: JSON.stringify(outcome), event: JSON.stringify(outcomeEvent(outcome)) },
          { failed: reason },
        )
        .catch(() => undefined);
      const moved = await job
        .moveToFailed(new UnrecoverableError(reason), token, fetchNext())
        .catch(() => undefined);
      next = await this.worker.nextOf(moved, token);
    };
    if (job.deferredFailure) {
      // BullMQ's stalled check gave up on it (stalled more than maxStalledCount).
      log.error({ callId: data.id, queue: queue.name }, 'call failed: its workers stopped twice');
      await fail(STALLED_TWICE);
      return next;
    }
    const call: QueuedCall = {
      job: data,
      restarts: job.stalledCounter,
      deferrals: Math.max(0, job.attemptsStarted - 1 - job.stalledCounter),
    };
    if (this.o.cancelMarker) {
      call.cancelledBy = await this.o.connection
        .get(this.o.cancelMarker(data.id))
        .catch(() => null);
    }
    const slot: CallSlot = {
      end: async (end, publish, charges) => {
        settled = true;
        const ending = async () => {
          // Released before the job completes: the waiting gateway hears first, and a lookup in
          // between finds the ended stub (the job is gone once completed).
          await queue.release(
            data,
            { json: JSON.stringify(end.outcome), event: JSON.stringify(end) },
            { publish, ...(charges ? { charges } : {}) },
          );
          const fetching = fetchNext() && !hold.given;
          next = await this.worker.nextOf(await job.moveToCompleted(null, token, fetching), token);
          if (fetching) this.drained = next === undefined;
        };
        await this.givingUpIfDown(ending(), hold);
        // Its slot went to other shards as Redis went away mid-fetch: the call it took anyway
        // runs beside them (one over, for one call).
        if (next && hold.given) {
          hold.given = false;
          this.pool.force();
        }
      },
      defer: async (delayMs) => {
        settled = true;
        await job.moveToDelayed(Date.now() + Math.max(1, Math.round(delayMs)), token);
        // Its lock went with it: not renewed, whatever the slot does before it is free.
        this.held.delete(job.id!);
      },
    };
    try {
      await this.o.handle(call, slot);
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      log.error({ callId: data.id, err: reason }, 'call failed outside the tool');
      // Not ended: end it failed (no record is written, as for any call failed outside its
      // tool). Ended but failed after: its end is in; a lost completion lets its lock lapse.
      if (!settled) await fail(reason);
    }
    return next;
  }
}
