import { createServer, type Server } from 'node:http';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import { DelayedError, Worker, type Job } from 'bullmq';
import {
  Admission,
  AuditLog,
  CallEventWriter,
  CallIndex,
  CallStore,
  FastLane,
  Heartbeat,
  Keys,
  ResultCache,
  ReplicaWait,
  RunLeases,
  Series,
  Stats,
  cancelledOutcome,
  createRedis,
  failedOutcome,
  outcomeEvent,
  publishOutcome,
  waitReady,
  FINAL_STATUSES,
  type CallDone,
  type CallJob,
  type CallOutcome,
  type LaneCall,
  type LeaseResult,
  type OutcomeEvent,
  type QueueKind,
  type Replication,
} from '@toolgate/calls';
import { CLIENT_LIMIT_DEFAULTS, type Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ToolRegistry, ToolServices } from '@toolgate/registry';
import { SpanKind, withSpan } from '@toolgate/telemetry';
import { createGuardedFetch } from '@toolgate/tools';
import { UpstreamCalls, UpstreamCatalog } from '@toolgate/upstreams';
import { createMetrics, type WorkerMetrics } from './metrics.js';
import { Recorder } from './recorder.js';
import { runTool } from './run-tool.js';
import { createResultChecker } from './result-check.js';

/** A lease outlives its call's timeout by this much before it counts as a dead worker's. */
const LEASE_GRACE_MS = 60_000;
/** First put-back delay of a call whose client is at its running cap; doubles, then jittered. */
const DEFER_BASE_MS = 100;
const DEFER_MAX_MS = 2000;
/**
 * How long the reserve slot holds a call it cannot run before handing it back: short right
 * after it ran a newcomer's call (whose next call is likely on its way), doubling to the
 * longest while no newcomer comes.
 */
const RESERVE_HOLD_MIN_MS = 20;
const RESERVE_HOLD_MAX_MS = 100;
/** A call the reserve handed back is out of reach this long (see handBack). */
const HAND_BACK_DELAY_MS = 100;
/** How long an idle fast-queue consumer blocks for new calls before it looks again (seconds). */
const FAST_WAIT_S = 2;
/**
 * How long a fast call handed out again (its worker died) may wait in the queue: a bound on
 * its job key's life, far above any wait a live deployment sees.
 */
const FAST_REQUEUED_TTL_MS = 3_600_000;

/** What running a call needs of its job (a BullMQ job, or a fast-lane call dressed as one). */
type RunnableJob = Pick<Job<CallJob>, 'data' | 'attemptsStarted'>;

/**
 * Ends a fast-lane call (one script: records its end, may publish it, may take the next).
 * `publish` false: the outcome goes out with the call's record instead (see execute).
 */
type LaneEnd = (end: OutcomeEvent, publish: boolean) => Promise<void>;

/** Cancels heard for calls not running here are remembered this long (a job may start late). */
const CANCEL_MEMORY_MS = 10 * 60_000;
const CANCEL_MEMORY_MAX = 10_000;

export interface WorkerOptions {
  config: Config;
  registry: ToolRegistry;
  logger: Logger;
  services: ToolServices;
  /** Which queues this process consumes (default both). */
  queues?: QueueKind[];
  /** Share a metrics registry made earlier (main.ts makes it to hook the sandbox in). */
  metrics?: WorkerMetrics;
  /** This worker's id (heartbeats, sandbox labels); default `newWorkerId()`. */
  id?: string;
  /**
   * Called when another worker's heartbeat stops or this worker's stalled-job check finds
   * calls of a dead worker: main.ts reaps the dead worker's sandboxes then, rather than at the
   * next reaper tick.
   */
  onLostCalls?: () => void;
}

/** host-pid-random: unique, and readable in logs and container labels. */
export function newWorkerId(): string {
  return `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
}

export interface ToolWorker {
  id: string;
  start(): Promise<void>;
  /** Metrics/health HTTP server on `worker.metricsPort` (0 = none). Returns the bound port. */
  serveMetrics(port?: number): Promise<number | undefined>;
  /** Stops taking jobs, finishes in-flight calls, then disconnects. */
  close(): Promise<void>;
}

/** Consumes tool calls from BullMQ and runs them; stateless, any number per Redis. */
export function createWorker({
  config,
  registry,
  logger,
  services: given,
  queues = ['fast', 'sandbox'],
  metrics = createMetrics(),
  id = newWorkerId(),
  onLostCalls,
}: WorkerOptions): ToolWorker {
  const log = logger.child({ component: 'worker', workerId: id });
  // Upstream MCP servers: their tools in the registry (the catalog), one SDK client per
  // upstream for the calls (docs/upstreams.md).
  const upstreamCalls =
    config.upstreams.length === 0
      ? undefined
      : new UpstreamCalls(config.upstreams, createGuardedFetch(config.policy.http));
  const services: ToolServices = upstreamCalls ? { ...given, upstreams: upstreamCalls } : given;
  let upstreamCatalog: UpstreamCatalog | undefined;
  const keys = Keys.for(config.redis);
  const redis = createRedis(config.redis, 'blocking');
  redis.on('error', (err) => log.debug({ err: err.message }, 'redis error'));
  const audit = new AuditLog(redis, keys, config.audit);
  const index = new CallIndex(redis, keys, config.calls.ttlSeconds);
  const stats = new Stats(redis, keys, { series: new Series(redis, keys), index });
  const cache = new ResultCache(redis, keys, config.calls.maxResultBytes);
  const store = new CallStore(redis, keys, config.calls.ttlSeconds, config.calls.maxResultBytes);
  const heartbeat = new Heartbeat(
    redis,
    keys,
    id,
    (dead) => {
      log.warn({ workers: dead }, 'worker heartbeat stopped');
      onLostCalls?.();
    },
    () => metrics.warmTotal(),
  );
  // Stale horizon is the gateway's business; the worker only removes entries.
  const admission = new Admission(redis, keys, 0);
  const leases = new RunLeases(redis, keys);
  const replicas = new ReplicaWait(config.redis, keys, config.redis.durability);
  let unreplicatedWarnedAt = 0;
  const sandboxInFlight = new Map(config.clients.map((c) => [c.id, c.limits.sandboxInFlight]));
  /**
   * Sandbox calls this worker runs or is taking a lease for. Counted before the lease's await,
   * so two calls starting at once never both see a normal slot free: a call that finds all
   * `sandboxConcurrency` of them taken is in the reserve (`sandboxReserve`), where only a
   * client with no sandbox call running anywhere may run.
   */
  let sandboxTaken = 0;
  let reserveHoldMs = RESERVE_HOLD_MIN_MS;
  /** Reserve holds in progress: a call ending here ends them, so a held call can take its slot. */
  const holds = new Set<() => void>();
  const shutdown = new AbortController();
  const workers: Worker[] = [];
  const recorder = new Recorder({
    redis,
    keys,
    store,
    admission,
    registry,
    audit,
    stats,
    metrics,
    log,
  });
  /**
   * The fast queue (FastLane): `concurrency` slots; a slot's call ends in one script that
   * takes the slot's next call, and an idle consumer blocks on the lane's wake key.
   */
  const lane = new FastLane(redis, keys);
  const laneBlocking = queues.includes('fast') ? createRedis(config.redis, 'blocking') : undefined;
  laneBlocking?.on('error', (err) => log.debug({ err: err.message }, 'redis error'));
  /** A fast call's lease: lapses like a BullMQ lock (see lockDuration below). */
  const laneLeaseMs = Math.round(config.worker.lostCallTimeoutMs / 2);
  const laneRunning = new Set<string>();
  const laneSlots = new Set<Promise<void>>();
  let laneFree = config.worker.concurrency;
  let laneSlotFreed: (() => void) | undefined;
  let laneStopping = false;
  let laneLoopDone: Promise<void> | undefined;
  const laneTimers: NodeJS.Timeout[] = [];
  let metricsServer: Server | undefined;
  /** Calls running here, by id: aborting one cancels it (reason: who cancelled). */
  const running = new Map<string, AbortController>();
  /** Cancels heard on the channel, by call id → who, for calls that start after the message. */
  const cancels = new Map<string, { by: string; at: number }>();
  const cancelSubscriber = createRedis(config.redis, 'blocking');
  cancelSubscriber.on('message', (_channel: string, message: string) => {
    let id: unknown, by: unknown;
    try {
      ({ id, by } = JSON.parse(message) as { id?: unknown; by?: unknown });
    } catch {
      return;
    }
    if (typeof id !== 'string') return;
    const who = typeof by === 'string' ? by : 'a client';
    rememberCancel(id, who);
    const controller = running.get(id);
    if (controller && !controller.signal.aborted) {
      log.info({ callId: id, by: who }, 'cancelling a running call');
      controller.abort(who);
    }
  });

  /** Remembers a cancel (oldest first in the map): forgotten after CANCEL_MEMORY_MS, or first when full. */
  function rememberCancel(id: string, by: string): void {
    const now = Date.now();
    cancels.delete(id);
    cancels.set(id, { by, at: now });
    for (const [key, { at }] of cancels) {
      if (now - at < CANCEL_MEMORY_MS && cancels.size <= CANCEL_MEMORY_MAX) break;
      cancels.delete(key);
    }
  }

  /**
   * Who cancelled this call before it started here, if anyone: the cancels heard, and for
   * sandbox calls the marker that backs up a missed message (a round trip is nothing next to
   * a sandbox; fast calls stay off Redis and the await).
   */
  function cancelledBefore(
    call: CallJob,
    kind: QueueKind,
  ): string | undefined | Promise<string | undefined> {
    const heard = cancels.get(call.id);
    if (heard || kind !== 'sandbox') return heard?.by;
    return redis
      .get(keys.cancelled(call.id))
      .then((by) => by ?? undefined)
      .catch(() => undefined);
  }
  const checkResult = createResultChecker(registry, metrics, log);

  async function processCall(
    job: Job<CallJob>,
    kind: QueueKind,
    token: string | undefined,
  ): Promise<CallOutcome> {
    const call = job.data;
    if (kind !== 'sandbox') return run(job, kind, 0);
    const reserve = ++sandboxTaken > config.worker.sandboxConcurrency;
    let lease: LeaseResult;
    try {
      const cap = sandboxInFlight.get(call.clientId) ?? CLIENT_LIMIT_DEFAULTS.sandboxInFlight;
      const leaseMs = (registry.get(call.tool)?.timeoutMs ?? 0) + LEASE_GRACE_MS;
      // In the reserve, only a client's first running call: cap 1.
      lease = await leases.acquire(call.clientId, kind, call.id, reserve ? 1 : cap, leaseMs);
    } catch (err) {
      sandboxTaken--;
      throw err;
    }
    if (!lease.granted) {
      sandboxTaken--;
      if (reserve) await handBack(job, token);
      // The client already runs its share: back to the queue (same priority) for a moment,
      // leaving this slot to the next call, which is another client's if one is waiting.
      metrics.deferred.inc({ queue: kind, client: call.clientId });
      await job.moveToDelayed(Date.now() + deferDelayMs(lease.deferrals), token);
      throw new DelayedError();
    }
    if (reserve) reserveHoldMs = RESERVE_HOLD_MIN_MS;
    try {
      return await run(job, kind, lease.deferrals);
    } finally {
      sandboxTaken--;
      for (const end of holds) end();
    }
  }

  /**
   * A call the reserve slot took whose client runs something already. The slot holds it for a
   * moment first, or it would take the next of that client's calls at once: the reserve looks
   * for a newcomer 10 to 50 times a second, not in a loop. A call ending here ends the hold.
   * Then the call goes back to the queue through a HAND_BACK_DELAY_MS delay, not straight to
   * its head: there this slot would win it back every time (it fetches at once, an idle worker
   * wakes first), and another slot of this worker could take it while BullMQ still counts this
   * run of it (its lock renewal is tracked by job id). Out of the waiting count for those
   * 100 ms only, one call per reserve slot; a call without a priority goes to the end of the
   * plain list, behind a newcomer's.
   */
  async function handBack(job: Job<CallJob>, token: string | undefined): Promise<never> {
    const hold = reserveHoldMs;
    reserveHoldMs = Math.min(RESERVE_HOLD_MAX_MS, hold * 2);
    await new Promise<void>((resolve) => {
      const end = () => {
        clearTimeout(timer);
        holds.delete(end);
        resolve();
      };
      const timer = setTimeout(end, hold);
      holds.add(end);
    });
    await job.moveToDelayed(Date.now() + HAND_BACK_DELAY_MS, token);
    throw new DelayedError();
  }

  async function run(
    job: RunnableJob,
    kind: QueueKind,
    deferrals: number,
    laneEnd?: LaneEnd,
  ): Promise<CallOutcome> {
    try {
      return await traced(job, kind, deferrals, laneEnd);
    } catch (err) {
      // Failed outside the tool: the call is over for BullMQ, so it is over for the limits too.
      // (A fast-lane call is ended by its slot, which knows whether its end was recorded.)
      if (!laneEnd) release(job.data, kind).catch(() => undefined);
      throw err;
    }
  }

  /**
   * Ends a call's in-flight entry and lease, and tells the waiting gateway and the call's
   * watchers: one round trip. The call enters its client's index first, so listings see it
   * in one place or the other until its record lands.
   */
  function release(call: CallJob, kind: QueueKind, end?: OutcomeEvent): Promise<unknown> {
    // A pipeline, not a transaction: Redis runs it in order, so a listing in between sees the
    // call in both places at worst.
    const done = redis.pipeline();
    index.addOneIn(done, call.clientId, call.id);
    admission.releaseIn(done, call.clientId, kind, call.id);
    if (kind === 'sandbox') leases.releaseIn(done, call.clientId, kind, call.id);
    if (end && call.replyTo) done.publish(call.replyTo, JSON.stringify(end.outcome));
    if (end) publishOutcome(done, keys, end);
    return done.exec();
  }

  /** Runs fast-lane calls in one slot, each call's end taking the next waiting one. */
  async function laneSlot(first: LaneCall): Promise<void> {
    let next: LaneCall | undefined = first;
    while (next) {
      const { job: call, restarts } = next;
      next = undefined;
      laneRunning.add(call.id);
      let ended = false;
      const laneEnd: LaneEnd = async (end, publish) => {
        ended = true;
        [next] = await lane.finish(
          call,
          { json: JSON.stringify(end.outcome), event: JSON.stringify(end) },
          { claimNext: !laneStopping, leaseMs: laneLeaseMs, publish },
        );
      };
      try {
        // BullMQ counts a job's first start as 1; each restart after a dead worker adds one.
        await run({ data: call, attemptsStarted: restarts + 1 }, 'fast', 0, laneEnd);
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        log.error({ callId: call.id, err: reason }, 'call failed outside the tool');
        // Not ended: end it failed (no record is written, as for a failed BullMQ job). Ended
        // but failed after: its end is in; a lost FINISH lets its lease lapse to the sweep.
        if (!ended) {
          const outcome = failedOutcome(call.id, call.tool, reason);
          await lane
            .finish(
              call,
              { json: JSON.stringify(outcome), event: JSON.stringify(outcomeEvent(outcome)) },
              { claimNext: false, leaseMs: laneLeaseMs, failed: reason },
            )
            .catch(() => undefined);
        }
      } finally {
        laneRunning.delete(call.id);
      }
    }
  }

  /** Claims fast calls for the free slots; blocks on the lane's wake key while there are none. */
  async function laneLoop(): Promise<void> {
    /** Whether the last claim failed: one warning per outage, not one per retry. */
    let failing = false;
    while (!laneStopping) {
      if (laneFree === 0) {
        await new Promise<void>((resolve) => (laneSlotFreed = resolve));
        continue;
      }
      let claimed: LaneCall[];
      try {
        claimed = await lane.claim(laneFree, laneLeaseMs);
      } catch (err) {
        if (!failing) {
          log.warn({ err: (err as Error).message }, 'could not take fast calls; trying again');
        }
        failing = true;
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
      if (failing) log.info('taking fast calls again');
      failing = false;
      if (claimed.length === 0) {
        await lane.waitForWork(laneBlocking!, FAST_WAIT_S).catch(async () => {
          if (!laneStopping) await new Promise((r) => setTimeout(r, 500));
        });
        continue;
      }
      for (const call of claimed) {
        laneFree--;
        const slot: Promise<void> = laneSlot(call).finally(() => {
          laneSlots.delete(slot);
          laneFree++;
          const wake = laneSlotFreed;
          laneSlotFreed = undefined;
          wake?.();
        });
        laneSlots.add(slot);
      }
    }
  }

  /** Starts the fast queue's consumer, its lease renewal and its sweep for dead workers' calls. */
  function startLane(): void {
    laneLoopDone = laneLoop();
    laneTimers.push(
      setInterval(
        () => {
          lane
            .renew([...laneRunning], laneLeaseMs)
            .catch((err: unknown) =>
              log.warn({ err: (err as Error).message }, 'could not renew fast calls’ leases'),
            );
        },
        Math.max(100, Math.round(laneLeaseMs / 3)),
      ),
      setInterval(
        () => {
          lane.sweep(FAST_REQUEUED_TTL_MS).then(
            ({ again, failed }) => {
              for (const callId of again) {
                log.warn({ callId, queue: 'fast' }, 'call of a dead worker moved on');
              }
              for (const callId of failed) {
                log.error({ callId, queue: 'fast' }, 'call failed: its workers stopped twice');
              }
              if (again.length + failed.length > 0) onLostCalls?.();
            },
            (err: unknown) =>
              log.warn({ err: (err as Error).message }, 'could not sweep the fast queue'),
          );
        },
        Math.max(100, Math.round(config.worker.lostCallTimeoutMs / 4)),
      ),
    );
  }

  /** Stops claiming fast calls and waits for the ones running here. */
  async function stopLane(): Promise<void> {
    laneStopping = true;
    for (const timer of laneTimers) clearInterval(timer);
    laneSlotFreed?.();
    // Ends a BZPOPMIN in progress; the loop sees laneStopping and returns.
    laneBlocking?.disconnect();
    await laneLoopDone;
    await Promise.all(laneSlots);
  }

  function traced(
    job: RunnableJob,
    kind: QueueKind,
    deferrals: number,
    laneEnd?: LaneEnd,
  ): Promise<CallOutcome> {
    const call = job.data;
    return withSpan(
      'toolgate.execute',
      {
        kind: SpanKind.CONSUMER,
        ...(call.trace ? { parent: call.trace } : {}),
        attributes: {
          'toolgate.tool': call.tool,
          'toolgate.client': call.clientId,
          'toolgate.call_id': call.id,
          'toolgate.queue': kind,
        },
      },
      async (span) => {
        const outcome = await execute(job, kind, deferrals, laneEnd);
        span.setAttribute('toolgate.status', outcome.status);
        if (outcome.error) span.setAttribute('toolgate.error_code', outcome.error.code);
        return outcome;
      },
    );
  }

  async function execute(
    job: RunnableJob,
    kind: QueueKind,
    deferrals: number,
    laneEnd?: LaneEnd,
  ): Promise<CallOutcome> {
    const call = job.data;
    const tool = registry.get(call.tool);
    let outcome: CallOutcome;
    metrics.inFlight.inc({ queue: kind });
    const cancel = new AbortController();
    running.set(call.id, cancel);
    const events = new CallEventWriter(redis, keys, call.id, config.calls.events, (err) =>
      log.debug({ err, callId: call.id }, 'could not write call events'),
    );
    /** The outcome was recorded before (a restarted call that had ended): not again. */
    let recorded = false;
    /** A non-idempotent run under redis.durability: recorded on replicas before anyone hears. */
    let durable = false;
    try {
      const before = cancelledBefore(call, kind);
      const cancelledBy = before instanceof Promise ? await before : before;
      if (cancelledBy !== undefined) {
        // Cancelled while it waited: it never runs.
        outcome = cancelledOutcome(call, cancelledBy);
      } else if (!tool) {
        outcome = errorOutcome(
          call,
          'unknown_tool',
          `this worker has no tool named "${call.tool}"`,
        );
      } else if (job.attemptsStarted - deferrals > 1 && !tool.idempotent) {
        // (Each fairness deferral started the job once without running it.)
        // A worker died while running this call; running a non-idempotent tool twice could
        // repeat its effects. Unless it died (or Redis failed over) after recording the outcome
        // and before BullMQ's completion: then the call ended, and its clients may have heard so.
        const ended = await store.get(call.id);
        if (ended?.outcome && FINAL_STATUSES.has(ended.status)) {
          outcome = ended.outcome;
          recorded = true;
        } else {
          outcome = errorOutcome(
            call,
            'worker_lost',
            `the worker running ${call.tool} stopped mid-call; it was not run again because the tool is not idempotent`,
          );
        }
      } else {
        if (!tool.idempotent) {
          await startReplicated(call);
          durable = replicas.enabled;
        }
        if (kind === 'sandbox') events.status('running');
        outcome = await runTool(tool, call, services, shutdown.signal, {
          cancel: cancel.signal,
          events: events.events,
          checkResult,
        });
        // Cached before anyone hears of the result, so an identical call right after it hits.
        if (tool.cacheTtlSeconds > 0 && outcome.status === 'ok') {
          const write = redis.multi();
          cache.addTo(write, tool, call.args, call.clientId, outcome.result);
          await write
            .exec()
            .catch((err: unknown) =>
              log.warn({ err, callId: call.id }, 'could not cache the result'),
            );
        }
      }
      // The record (the one stored copy, capped at calls.maxResultBytes), audit entry and
      // stats are written in batches alongside; until the record lands, GET /v1/calls reads
      // the completed job as running. The waiting gateway gets the whole outcome now (a
      // message, not storage, bounded by the tools' own output limits), and the client's
      // in-flight entry and lease go in the same round trip, before the client can send its
      // next call. Calls nobody waits for are released in the record batch. A fast-lane call
      // ends in its lane's one script, whoever waits.
      const end = events.idle ? events.finish(outcome) : await events.finishWrites(outcome);
      const releaseNow =
        laneEnd !== undefined || recorded || call.replyTo !== undefined || kind === 'sandbox';
      // A fast call nobody waits for ends in the lane at once, and its watchers hear of it
      // with its record (as a sandbox call's do): who heard the outcome finds the record.
      const withRecord = !recorded && (!releaseNow || (laneEnd && call.replyTo === undefined));
      const finished = {
        call,
        kind,
        outcome,
        release: !releaseNow,
        ...(withRecord ? { end } : {}),
      };
      if (durable) await recordReplicated(finished);
      else if (!recorded) recorder.add(finished);
      if (laneEnd) await laneEnd(end, !withRecord);
      else if (releaseNow) release(call, kind, end).catch(() => undefined);
      metrics.executions.inc({ tool: call.tool, client: call.clientId, status: outcome.status });
      metrics.executionDuration.observe({ tool: call.tool }, outcome.durationMs / 1000);
      log.debug(
        { callId: call.id, tool: call.tool, status: outcome.status, ms: outcome.durationMs },
        'call finished',
      );
      return outcome;
    } finally {
      running.delete(call.id);
      metrics.inFlight.dec({ queue: kind });
    }
  }

  /**
   * With `redis.durability.replicas` > 0, before a non-idempotent tool runs: waits until the
   * call's start (BullMQ's moveToActive, which counted `attemptsStarted`) is on that many
   * replicas. A failover after this point hands the call out again as a restarted one, which
   * the check above turns into `worker_lost` (or the recorded outcome), never into a second
   * run. A WAIT that times out runs the call anyway (counted, logged): the replicas are gone or
   * lagging, and holding every call back would not bring them back. Redis failing over
   * meanwhile leaves it unknown whether the new master knows of this start, so the call is not
   * run here: if the start was lost the new master hands the call out afresh; if not, the call
   * fails with this error.
   */
  async function startReplicated(call: CallJob): Promise<void> {
    if (!replicas.enabled) return;
    try {
      unreplicated(await replicas.confirm(), 'start');
    } catch (err) {
      throw new Error(
        `Redis failed over as ${call.tool} was starting, before its start reached a replica; it was not run, so that it cannot run twice`,
        { cause: err },
      );
    }
  }

  /**
   * After a non-idempotent run under redis.durability: its record (and audit entry, stats) are
   * written now, not batched, and on the replicas before its reply goes out — so an outcome a
   * client has heard survives a failover, and the restarted job finds it instead of ending
   * `worker_lost`. Redis failing over meanwhile fails the job without a reply: the outcome the
   * client then reads is the one the new master has.
   */
  async function recordReplicated(finished: Parameters<Recorder['add']>[0]): Promise<void> {
    try {
      await recorder.now(finished);
      unreplicated(await replicas.confirm(), 'outcome');
    } catch (err) {
      throw new Error(
        `${finished.call.tool} ran, but Redis failed over before its outcome was recorded on a replica`,
        { cause: err },
      );
    }
  }

  function unreplicated(replication: Replication, step: 'start' | 'outcome'): void {
    if (replication.replicated) return;
    metrics.unreplicated.inc({ step });
    if (Date.now() - unreplicatedWarnedAt < 10_000) return;
    unreplicatedWarnedAt = Date.now();
    log.warn(
      { acked: replication.acked, wanted: replicas.durability.replicas, ms: replication.ms, step },
      'non-idempotent calls go on with their start or outcome on the Redis master only: WAIT timed out (toolgate_redis_unreplicated_total)',
    );
  }

  return {
    id,
    async start() {
      await waitReady(redis);
      // Listening before taking jobs: no cancel of a call this worker runs goes unheard. (A
      // SUBSCRIBE sent while the connection runs its ready check turns that check into an
      // error and a reconnect that forgets the channel: subscribe once it is ready.)
      await waitReady(cancelSubscriber);
      await cancelSubscriber.subscribe(keys.cancels);
      for (const kind of queues) {
        if (kind === 'fast') {
          await waitReady(laneBlocking!);
          startLane();
          continue;
        }
        const worker = new Worker<CallJob, CallDone>(
          keys.queue(kind),
          // The job's return value is a marker: the job hash keeps no copy of the result.
          (job, token) => processCall(job, kind, token).then(({ status }) => ({ status })),
          {
            connection: createRedis(config.redis, 'blocking'),
            prefix: keys.bullPrefix,
            concurrency: config.worker.sandboxConcurrency + config.worker.sandboxReserve,
            // A stalled job (its worker died) is handed out once more, where `process` decides.
            maxStalledCount: 1,
            // A dead worker's lock lapses within 1/2 of lostCallTimeoutMs. BullMQ's check, every
            // 1/4, moves a job only if it was already in the stalled set at the check before,
            // and the dead worker's last lock renewal took it out of that set: up to two checks
            // after the lapse. Settled within 1/2 + 2 × 1/4 = lostCallTimeoutMs (measured:
            // 2/3 + 2 × 1/3 had calls settle up to 15.8 s after a death, for a 12 s setting).
            lockDuration: Math.round(config.worker.lostCallTimeoutMs / 2),
            stalledInterval: Math.round(config.worker.lostCallTimeoutMs / 4),
          },
        );
        worker.on('stalled', (callId) => {
          log.warn({ callId, queue: kind }, 'call of a dead worker moved on');
          onLostCalls?.();
        });
        worker.on('error', (err) => log.warn({ err: err.message, queue: kind }, 'queue error'));
        worker.on('failed', (job, err) => {
          log.error({ callId: job?.id, err: err.message }, 'job failed outside the tool');
          // Also a job that stalled twice (its workers died): it will not run again.
          if (job) release(job.data, kind).catch(() => undefined);
        });
        workers.push(worker);
      }
      await Promise.all(workers.map((w) => w.waitUntilReady()));
      if (config.upstreams.length > 0) {
        upstreamCatalog = UpstreamCatalog.open({
          upstreams: config.upstreams,
          registry,
          redis: config.redis,
          fetch: createGuardedFetch(config.policy.http),
          log: log.child({ component: 'upstreams' }),
          audit: config.audit,
        });
        await upstreamCatalog.ready();
      }
      await heartbeat.start();
      log.info(
        {
          queues,
          concurrency: config.worker.concurrency,
          sandboxConcurrency: config.worker.sandboxConcurrency,
          sandboxReserve: config.worker.sandboxReserve,
          tools: registry.size,
        },
        'worker started',
      );
    },
    async serveMetrics(port?: number) {
      // An explicit 0 binds any free port; the configured 0 means "no metrics server".
      if (port === undefined && config.worker.metricsPort === 0) return undefined;
      const listenPort = port ?? config.worker.metricsPort;
      metricsServer = createServer((req, res) => {
        if (req.url === '/metrics') {
          metrics.registry.metrics().then(
            (text) =>
              res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
            () => res.writeHead(500).end(),
          );
        } else if (req.url === '/healthz') {
          res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify({ status: 'ok', workerId: id }));
        } else {
          res.writeHead(404).end();
        }
      });
      await new Promise<void>((resolve) => metricsServer!.listen(listenPort, resolve));
      const address = metricsServer.address();
      return typeof address === 'object' && address ? address.port : listenPort;
    },
    async close() {
      log.info('worker stopping: finishing in-flight calls');
      // BullMQ's close waits for the jobs in progress; tools see shutdown only if they outlive it.
      await Promise.all([stopLane(), ...workers.map((w) => w.close())]);
      await recorder.drain();
      shutdown.abort();
      await upstreamCatalog?.close();
      await upstreamCalls?.close();
      await heartbeat.stop();
      metricsServer?.close();
      cancelSubscriber.disconnect();
      replicas.close();
      redis.disconnect();
      log.info('worker stopped');
    },
  };
}

/** Doubling with the deferrals so far, capped, plus up to as much again of jitter. */
function deferDelayMs(deferrals: number): number {
  const base = Math.min(DEFER_MAX_MS, DEFER_BASE_MS * 2 ** Math.min(deferrals, 10));
  return Math.round(base + Math.random() * base);
}

function errorOutcome(call: CallJob, code: string, message: string): CallOutcome {
  return {
    id: call.id,
    tool: call.tool,
    status: 'error',
    error: { code, message },
    durationMs: 0,
    cached: false,
  };
}
