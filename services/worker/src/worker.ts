import { createServer, type Server } from 'node:http';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import {
  AuditLog,
  Budgets,
  budgetConfig,
  CallEventWriter,
  CallIndex,
  CallStore,
  CodeModeCapabilities,
  Heartbeat,
  CallQueue,
  queueTelemetry,
  Keys,
  ResultCache,
  ReplicaWait,
  SessionStore,
  RunLeases,
  Series,
  Stats,
  cancelledOutcome,
  createRedis,
  redactValues,
  waitReady,
  FINAL_STATUSES,
  type CallJob,
  type CallOutcome,
  type QueueKind,
  type QueueName,
  type RedisClient,
  type Replication,
} from '@toolgate/calls';
import {
  CLIENT_LIMIT_DEFAULTS,
  ShardMap,
  isStdioUpstream,
  type Config,
  type Shard,
} from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import {
  CallMeter,
  type Tool,
  type ToolEvents,
  type ToolRegistry,
  type ToolServices,
} from '@toolgate/registry';
import { CredentialRules, KeyRing, SecretConfigError, SecretStore } from '@toolgate/secrets';
import { SpanKind, tracingActive, withSpan } from '@toolgate/telemetry';
import { createGuardedFetch } from '@toolgate/tools';
import { StdioServers, UpstreamCalls, UpstreamCatalog } from '@toolgate/upstreams';
import { createMetrics, type WorkerMetrics } from './metrics.js';
import { usageOf } from './usage.js';
import { QueueConsumer, type CallEnd, type CallSlot, type QueuedCall } from './queue-consumer.js';
import { Recorder } from './recorder.js';
import { SlotPool } from './slot-pool.js';
import { runTool } from './run-tool.js';
import { createResultChecker } from './result-check.js';
import { SessionHost } from './sessions/session-host.js';
import { CodeModeBroker } from './code-mode.js';
import { catchUpUpstreamTool } from './upstream-catch-up.js';

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
/**
 * Slots of a worker's session queue: calls of this many sessions run at once (each session's
 * own calls run one at a time, so a slot may wait behind its session's earlier call).
 */
const SESSION_SLOTS = 16;
/** How long a sharded worker's start waits for its shards before it serves those that answer. */
const SHARD_START_WAIT_MS = 10_000;
/** How long a sharded worker's close waits on a shard whose Redis is down. */
const SHARD_DOWN_STOP_MS = 2000;

/**
 * What running a call needs of its job: the call, and its starts so far (1, or 2 once a dead
 * worker's lease handed it out again).
 */
interface RunnableJob {
  data: CallJob;
  attemptsStarted: number;
  /** Who cancelled it before it was taken, from its cancel marker (sandbox calls). */
  cancelledBy?: string | null;
}

/** Cancels heard for calls not running here are remembered this long (a job may start late). */
const CANCEL_MEMORY_MS = 10 * 60_000;
const CANCEL_MEMORY_MAX = 10_000;

/**
 * What a worker keeps on one shard's Redis (docs/sharding.md#workers): everything built on
 * one Redis, so a call runs with its client's shard's.
 */
interface Lane {
  shard: Shard;
  log: Logger;
  redis: RedisClient;
  keys: Keys;
  store: CallStore;
  cache: ResultCache;
  leases: RunLeases;
  budgets: Budgets;
  credentials: ReturnType<typeof startCredentials>;
  replicas: ReplicaWait;
  recorder: Recorder;
  heartbeat: Heartbeat;
  consumers: QueueConsumer[];
  sessions: SessionHost | undefined;
  cancelSubscriber: RedisClient;
  unreplicatedWarnedAt: number;
  /** Taking its calls. */
  up: boolean;
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

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
  /**
   * Metrics/health HTTP server on `worker.metricsPort` (0 = none), on `server.host` as the
   * gateway's (127.0.0.1 with no clients configured): the series name clients and tools.
   * Returns the bound port.
   */
  serveMetrics(port?: number, host?: string): Promise<number | undefined>;
  /** Stops taking jobs, finishes in-flight calls, then disconnects. */
  close(): Promise<void>;
}

/** Takes tool calls from the queues (BullMQ) and runs them; stateless, any number per Redis. */
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
  // Stdio upstreams run in this worker's sandboxes, one per upstream (docs/upstreams.md).
  const { sandbox, workspaces } = given as Partial<ToolServices>;
  const stdioServers =
    sandbox && config.upstreams.some(isStdioUpstream)
      ? new StdioServers(config.upstreams, {
          open: (request) => sandbox.open(request),
          ...(workspaces ? { workspaceOf: (client: string) => workspaces.ensure(client) } : {}),
          log: log.child({ component: 'upstreams' }),
          // One server per host: the workers sharing this stateDir share it (docs/upstreams.md).
          share: {
            dir: path.join(sandbox.config.stateDir, 'upstreams'),
            // and its driver: a docker worker and a bwrap worker on one stateDir run their own.
            scope: `${config.redis.prefix}|${sandbox.name}`,
            worker: id,
          },
        })
      : undefined;
  const upstreamCalls =
    config.upstreams.length === 0
      ? undefined
      : new UpstreamCalls(
          config.upstreams,
          createGuardedFetch(config.policy.http),
          stdioServers,
          log.child({ component: 'upstreams' }),
        );
  let upstreamCatalog: UpstreamCatalog | undefined;
  const shards = new ShardMap(config);
  /**
   * The slots of each kind, shared by the consumers of every shard: at most `concurrency` fast
   * and `sandboxConcurrency + sandboxReserve` sandbox calls at once however many shards there
   * are, and a shard waiting for a slot gets the next one freed (docs/sharding.md#workers).
   */
  const pools = {
    fast: new SlotPool(config.worker.concurrency, shards.sharded),
    sandbox: new SlotPool(
      config.worker.sandboxConcurrency + config.worker.sandboxReserve,
      shards.sharded,
    ),
    session: new SlotPool(SESSION_SLOTS, shards.sharded),
  };
  // Deployment-wide things live on the home shard: code mode's capabilities, the catalogs.
  const homeRedis = createRedis(shards.home.redis, 'blocking');
  // Code mode: scripts' nested calls go to a gateway under a capability (docs/code-mode.md).
  const codeMode =
    given.codeMode ??
    new CodeModeBroker({
      capabilities: new CodeModeCapabilities(homeRedis, Keys.for(shards.home.redis)),
      gatewayUrl: config.codeMode.gatewayUrl,
      maxCalls: config.codeMode.maxCalls,
      maxResultBytes: config.codeMode.maxResultBytes,
      log: log.child({ component: 'code-mode' }),
    });
  const services: ToolServices = {
    ...given,
    codeMode,
    ...(upstreamCalls ? { upstreams: upstreamCalls } : {}),
  };
  const sandboxInFlight = new Map(config.clients.map((c) => [c.id, c.limits.sandboxInFlight]));
  const userSandboxInFlight = new Map(
    config.clients.flatMap((c) =>
      c.limits.perUser?.sandboxInFlight === undefined
        ? []
        : [[c.id, c.limits.perUser.sandboxInFlight] as const],
    ),
  );
  /**
   * Sandbox calls this worker runs or is taking a lease for, on every shard. Counted before the
   * lease's await, so two calls starting at once never both see a normal slot free: a call that
   * finds all `sandboxConcurrency` of them taken is in the reserve (`sandboxReserve`), where only
   * a client with no sandbox call running anywhere may run.
   */
  let sandboxTaken = 0;
  let reserveHoldMs = RESERVE_HOLD_MIN_MS;
  /** Reserve holds in progress: a call ending here ends them, so a held call can take its slot. */
  const holds = new Set<() => void>();
  const shutdown = new AbortController();
  /** BullMQ's spans (bullmq-otel) when tracing is on: a call's add and run join its trace. */
  const telemetry = queueTelemetry(tracingActive());
  let metricsServer: Server | undefined;
  /** Calls running here, by id, on any shard: aborting one cancels it (reason: who cancelled). */
  const running = new Map<string, AbortController>();
  /** Cancels heard on the channel, by call id → who, for calls that start after the message. */
  const cancels = new Map<string, { by: string; at: number }>();
  const onCancel = (lane: Lane) => (_channel: string, message: string) => {
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
      lane.log.info({ callId: id, by: who }, 'cancelling a running call');
      controller.abort(who);
    }
  };

  /**
   * Everything the worker keeps on one shard's Redis: its connections and stores, its
   * consumers (fast, sandbox, this worker's session queue), its heartbeat and cancel channel.
   * A client's calls and data are all on its shard, so a call is run with its lane's.
   */
  function openLane(shard: Shard, redis: RedisClient): Lane {
    const laneLog = shards.sharded ? log.child({ shard: shard.id }) : log;
    const keys = Keys.for(shard.redis);
    redis.on('error', (err) => laneLog.debug({ err: err.message }, 'redis error'));
    const audit = new AuditLog(redis, keys, config.audit);
    const index = new CallIndex(redis, keys, config.calls.ttlSeconds);
    const stats = new Stats(redis, keys, { series: new Series(redis, keys), index });
    const store = new CallStore(redis, keys, config.calls.ttlSeconds, config.calls.maxResultBytes);
    const lane: Lane = {
      shard,
      log: laneLog,
      redis,
      keys,
      store,
      cache: new ResultCache(redis, keys, config.calls.maxResultBytes),
      heartbeat: new Heartbeat(
        redis,
        keys,
        id,
        (dead) => {
          laneLog.warn({ workers: dead }, 'worker heartbeat stopped');
          onLostCalls?.();
        },
        () => metrics.warmTotal(),
      ),
      leases: new RunLeases(redis, keys),
      /** Spend budgets: charged with each call's end (docs/budgets.md). */
      budgets: new Budgets(redis, keys, budgetConfig(config.clients)),
      // A client's secrets live on its shard.
      credentials: startCredentials(config, redis, keys),
      replicas: new ReplicaWait(shard.redis, keys, shard.redis.durability),
      unreplicatedWarnedAt: 0,
      recorder: new Recorder({ redis, keys, store, registry, audit, stats, metrics, log: laneLog }),
      consumers: [],
      sessions: undefined,
      cancelSubscriber: createRedis(shard.redis, 'blocking'),
      up: false,
    };
    lane.cancelSubscriber.on('message', onCancel(lane));
    // Served and reachable: what /healthz and toolgate_worker_shard_up say of the shard.
    const reachable = (up: boolean) => {
      if (lane.up) metrics.shardUp.set({ shard: shard.id }, up ? 1 : 0);
    };
    redis.on('ready', () => reachable(true));
    redis.on('close', () => reachable(false));
    /**
     * A consumer of one BullMQ queue. A call's lock lapses like a lease: 1/2 of
     * lostCallTimeoutMs, renewed every 1/6, BullMQ's stalled check every 1/4
     * (docs/reliability.md).
     */
    const consumer = (
      kind: QueueKind,
      name: QueueName,
      slots: SlotPool,
      handle: (call: QueuedCall, slot: CallSlot) => Promise<void>,
    ): QueueConsumer => {
      const connection = createRedis(shard.redis, 'blocking');
      return new QueueConsumer({
        queue: new CallQueue(connection, keys, kind, name),
        connection,
        workerId: id,
        slots,
        lockMs: Math.round(config.worker.lostCallTimeoutMs / 2),
        stalledEveryMs: Math.round(config.worker.lostCallTimeoutMs / 4),
        // A sandbox call's cancel marker backs up a cancel message this worker missed.
        ...(kind === 'sandbox' && name === kind
          ? { cancelMarker: (c: string) => keys.cancelled(c) }
          : {}),
        ...(telemetry ? { telemetry } : {}),
        log: laneLog,
        handle,
        ...(onLostCalls ? { onLost: onLostCalls } : {}),
      });
    };
    // The queues this worker takes, with the worker's slots of each kind.
    lane.consumers = queues.map((kind) =>
      kind === 'fast'
        ? consumer(kind, kind, pools.fast, (call, slot) => handleFast(lane, call, slot))
        : consumer(kind, kind, pools.sandbox, (call, slot) => handleSandbox(lane, call, slot)),
    );
    /**
     * Sessions (docs/sessions.md) live on workers that run sandboxes: their calls come through
     * this worker's own queue, so any gateway reaches the worker that holds a session's sandbox.
     */
    if (queues.includes('sandbox') && (services as Partial<ToolServices>).sandbox) {
      const sessions = new SessionHost({
        workerId: id,
        config,
        store: new SessionStore(redis, keys, config.worker.lostCallTimeoutMs),
        services,
        subscriber: createRedis(shard.redis, 'blocking'),
        killChannel: keys.sessionKills,
        log: laneLog,
      });
      lane.sessions = sessions;
      lane.consumers.push(
        consumer('sandbox', keys.sessionQueue(id), pools.session, (call, slot) =>
          handleSession(lane, sessions, call, slot),
        ),
      );
    }
    return lane;
  }

  const lanes = shards.list.map((shard) =>
    openLane(shard, shard.home ? homeRedis : createRedis(shard.redis, 'blocking')),
  );
  const homeLane = lanes.find((l) => l.shard.home)!;
  /** Lanes whose start is still waiting for their Redis (sharded only), and how to stop it. */
  const starting = new Map<Lane, Promise<void>>();
  let closing = false;

  /**
   * Starts taking one shard's calls: listening for cancels before taking jobs, so no cancel of
   * a call this worker runs goes unheard. (A SUBSCRIBE sent while the connection runs its ready
   * check turns that check into an error and a reconnect that forgets the channel: subscribe
   * once it is ready.)
   */
  async function serveLane(lane: Lane): Promise<void> {
    await waitReady(lane.redis);
    await waitReady(lane.cancelSubscriber);
    await lane.cancelSubscriber.subscribe(lane.keys.cancels);
    await Promise.all(lane.consumers.map((c) => c.ready()));
    await lane.sessions?.start();
    if (closing) return;
    for (const consumer of lane.consumers) consumer.start();
    lane.up = true;
    metrics.shardUp.set({ shard: lane.shard.id }, 1);
  }

  /** Beats on a shard: its gateways count this worker live from now on. */
  async function beatLane(lane: Lane): Promise<void> {
    if (!closing) await lane.heartbeat.start();
  }

  /** The upstream catalog, on the home shard (deployment-wide). */
  async function openCatalog(): Promise<void> {
    if (config.upstreams.length === 0) return;
    upstreamCatalog = UpstreamCatalog.open({
      upstreams: config.upstreams,
      registry,
      redis: shards.home.redis,
      fetch: createGuardedFetch(config.policy.http),
      log: log.child({ component: 'upstreams' }),
      audit: config.audit,
      ...(stdioServers ? { stdio: stdioServers, workerId: id } : {}),
    });
    stdioServers?.startEager();
    await upstreamCatalog.ready();
  }

  /**
   * A shard's start that does not hold up the others' (sharded only): tried again until its
   * Redis answers or the worker closes, each failure logged with the shard's id. It beats once
   * the catalog is open, or after SHARD_START_WAIT_MS if the home shard is what is down.
   */
  async function startLaneUntilUp(lane: Lane, catalog: Promise<unknown>): Promise<void> {
    metrics.shardUp.set({ shard: lane.shard.id }, 0);
    while (!closing) {
      try {
        await serveLane(lane);
        break;
      } catch (err) {
        if (closing) return;
        lane.log.warn(
          { err: (err as Error).message },
          "shard unreachable: the worker serves the others; this one's calls wait until it answers",
        );
        await pause(1000);
      }
    }
    if (closing) return;
    lane.log.info('serving the shard');
    await Promise.race([catalog, pause(SHARD_START_WAIT_MS)]);
    await beatLane(lane);
  }

  /**
   * Runs a step of closing a lane; with several shards, gives up on it once the shard's Redis
   * has been down for SHARD_DOWN_STOP_MS (its commands would wait for it to come back). One
   * Redis is waited for, as before shards (start.ts bounds the whole drain).
   */
  async function unlessDown(lane: Lane, step: string, work: () => Promise<unknown>): Promise<void> {
    const done = work().then(
      () => true,
      (err: unknown) => {
        lane.log.warn({ err, step }, 'could not stop cleanly');
        return true;
      },
    );
    if (!shards.sharded) {
      await done;
      return;
    }
    let downSince: number | undefined;
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<false>((resolve) => {
      timer = setInterval(() => {
        if (lane.redis.status === 'ready') {
          downSince = undefined;
          return;
        }
        downSince ??= Date.now();
        if (Date.now() - downSince >= SHARD_DOWN_STOP_MS) resolve(false);
      }, 100);
    });
    const finished = await Promise.race([done, gaveUp]).finally(() => clearInterval(timer));
    if (!finished) lane.log.warn({ step }, 'shard down: the worker stops without waiting for it');
  }

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
   * sandbox calls the marker that backs up a missed message, read with the call's job when it
   * was taken (fast calls go by the cancels heard alone).
   */
  function cancelledBefore(job: RunnableJob): string | undefined {
    return cancels.get(job.data.id)?.by ?? job.cancelledBy ?? undefined;
  }
  const checkResult = createResultChecker(registry, metrics, log);

  /** Runs a fast call in its slot. */
  async function handleFast(lane: Lane, call: QueuedCall, slot: CallSlot): Promise<void> {
    await run(lane, { data: call.job, attemptsStarted: call.restarts + 1 }, 'fast', slot.end);
  }

  /**
   * Runs a session's call in its sandbox. No running lease: the session's sandbox exists
   * already, and its calls run one at a time.
   */
  async function handleSession(
    lane: Lane,
    host: SessionHost,
    call: QueuedCall,
    slot: CallSlot,
  ): Promise<void> {
    const tool = registry.get(call.job.tool);
    const bound = tool && call.job.session ? host.bind(tool, call.job) : undefined;
    await run(
      lane,
      { data: call.job, attemptsStarted: call.restarts + 1 },
      'sandbox',
      slot.end,
      bound,
    );
  }

  /**
   * Runs a sandbox call in its slot once it holds its client's running lease; else puts it
   * back for a moment (its client runs its share already), leaving the slot to the next call,
   * which is another client's if one is waiting.
   */
  async function handleSandbox(lane: Lane, call: QueuedCall, slot: CallSlot): Promise<void> {
    const { job } = call;
    const reserve = ++sandboxTaken > config.worker.sandboxConcurrency;
    let granted: boolean;
    try {
      const cap = sandboxInFlight.get(job.clientId) ?? CLIENT_LIMIT_DEFAULTS.sandboxInFlight;
      const leaseMs = (registry.get(job.tool)?.timeoutMs ?? 0) + LEASE_GRACE_MS;
      // In the reserve, only a client's first running call: cap 1.
      const userCap = job.user === undefined ? undefined : userSandboxInFlight.get(job.clientId);
      granted = await lane.leases.acquire(
        job.clientId,
        'sandbox',
        job.id,
        reserve ? 1 : cap,
        leaseMs,
        userCap === undefined ? undefined : { id: job.user!, cap: userCap },
      );
    } catch (err) {
      sandboxTaken--;
      throw err;
    }
    if (!granted) {
      sandboxTaken--;
      if (reserve) return handBack(slot);
      metrics.deferred.inc({ queue: 'sandbox', client: job.clientId });
      await slot.defer(deferDelayMs(call.deferrals));
      return;
    }
    if (reserve) reserveHoldMs = RESERVE_HOLD_MIN_MS;
    let released = false;
    /**
     * The slot counts as free from the moment the call ends in its queue, not once that end
     * has come back: its end answers the client, whose next call a claim may take before this
     * await resumes, and would then find every normal slot taken and go the reserve's way
     * (held, handed back, put back for 100 ms) though a slot is free.
     */
    const release = () => {
      if (released) return;
      released = true;
      sandboxTaken--;
      for (const end of holds) end();
    };
    try {
      await run(
        lane,
        { data: job, attemptsStarted: call.restarts + 1, cancelledBy: call.cancelledBy },
        'sandbox',
        (end, publish, charges) => {
          release();
          return slot.end(end, publish, charges);
        },
      );
    } finally {
      release();
    }
  }

  /**
   * A call the reserve slot took whose client runs something already. The slot holds it for a
   * moment first, or it would take the next of that client's calls at once: the reserve looks
   * for a newcomer 10 to 50 times a second, not in a loop. A call ending here ends the hold.
   * Then the call goes back to its place in the queue through a HAND_BACK_DELAY_MS delay, not
   * straight away: then this slot would win it back every time (it claims at once, before an
   * idle worker wakes). Out of the waiting count for those 100 ms only, one call per reserve
   * slot.
   *
   * The slot then sits out the delay and as long again (or until a call here ends): when the
   * call comes due, a worker with a regular slot free takes it. Were this slot free by then,
   * its worker would race the others for the call and, winning, hand it back once more — and
   * a worker that missed the wake waits out BullMQ's drainDelay (1 s): calls were seen to wait
   * over a second, handed back three times, with a regular slot free elsewhere.
   */
  async function handBack(slot: CallSlot): Promise<void> {
    const hold = reserveHoldMs;
    reserveHoldMs = Math.min(RESERVE_HOLD_MAX_MS, hold * 2);
    await pauseUntilACallEnds(hold);
    await slot.defer(HAND_BACK_DELAY_MS);
    await pauseUntilACallEnds(2 * HAND_BACK_DELAY_MS);
  }

  /** Waits `ms`, or less: until a call of this worker ends. */
  function pauseUntilACallEnds(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const end = () => {
        clearTimeout(timer);
        holds.delete(end);
        resolve();
      };
      const timer = setTimeout(end, ms);
      holds.add(end);
    });
  }

  /**
   * Runs a call its slot holds; `queueEnd` ends it in its queue. A call that fails outside its
   * tool is ended by its slot (which knows whether its end was recorded).
   */
  function run(
    lane: Lane,
    job: RunnableJob,
    kind: QueueKind,
    queueEnd: CallEnd,
    bound?: Tool,
  ): Promise<CallOutcome> {
    return traced(lane, job, kind, queueEnd, bound);
  }

  function traced(
    lane: Lane,
    job: RunnableJob,
    kind: QueueKind,
    queueEnd: CallEnd,
    bound: Tool | undefined,
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
          ...(call.user === undefined ? {} : { 'toolgate.user': call.user }),
          'toolgate.call_id': call.id,
          'toolgate.queue': kind,
        },
      },
      async (span) => {
        const outcome = await execute(lane, job, kind, queueEnd, bound);
        span.setAttribute('toolgate.status', outcome.status);
        if (outcome.error) span.setAttribute('toolgate.error_code', outcome.error.code);
        return outcome;
      },
    );
  }

  /** `bound`: the tool as a session runs it (SessionHost.bind), instead of the registry's. */
  async function execute(
    lane: Lane,
    job: RunnableJob,
    kind: QueueKind,
    queueEnd: CallEnd,
    bound?: Tool,
  ): Promise<CallOutcome> {
    const call = job.data;
    const { redis, keys, store, cache, recorder, budgets, credentials: credentialRules } = lane;
    const log = lane.log;
    const tool =
      bound ??
      registry.get(call.tool) ??
      (await catchUpUpstreamTool(upstreamCatalog, config.upstreams, registry, call.tool));
    let outcome: CallOutcome;
    metrics.inFlight.inc({ queue: kind });
    const cancel = new AbortController();
    running.set(call.id, cancel);
    const events = new CallEventWriter(redis, keys, call.id, config.calls.events, (err) =>
      log.debug({ err, callId: call.id }, 'could not write call events'),
    );
    /** The outcome was recorded before (a restarted call that had ended): not again. */
    let recorded = false;
    /** The tool's handler was started here (what the call spent beyond one call). */
    let ran = false;
    /** What only the tool sees of its use (a network sandbox's egress), taken once at the end. */
    const meter = new CallMeter();
    /** A non-idempotent run under redis.durability: recorded on replicas before anyone hears. */
    let durable = false;
    try {
      const cancelledBy = cancelledBefore(job);
      if (cancelledBy !== undefined) {
        // Cancelled while it waited: it never runs.
        outcome = cancelledOutcome(call, cancelledBy);
      } else if (!tool) {
        outcome = errorOutcome(
          call,
          'unknown_tool',
          `this worker has no tool named "${call.tool}"`,
        );
      } else if (job.attemptsStarted > 1 && !tool.idempotent) {
        // A worker died while running this call; running a non-idempotent tool twice could
        // repeat its effects. Unless it died (or Redis failed over) after recording the outcome
        // and before its end in the queue: then the call ended, and its clients may have heard so.
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
          await startReplicated(lane, call);
          durable = lane.replicas.enabled;
        }
        if (kind === 'sandbox') events.status('running');
        // Decrypted values this call injects never leave it: out of its live output and its
        // outcome (the record, the audit entry, the reply, the cache), whatever echoed them.
        const credentials = credentialRules?.forCall(call.clientId, call.user);
        ran = true;
        outcome = await runTool(tool, call, services, shutdown.signal, {
          cancel: cancel.signal,
          meter,
          events: credentials ? redactedEvents(events.events, credentials.used) : events.events,
          checkResult,
          ...(credentials ? { credentials } : {}),
        });
        if (credentials) outcome = redactValues(outcome, credentials.used);
        // Cached before anyone hears of the result, so an identical call right after it hits.
        // Not when credentials went out: the answer is that user's, and the cache is per client.
        if (tool.cacheTtlSeconds > 0 && outcome.status === 'ok' && !credentials?.used.size) {
          const write = redis.multi();
          cache.addTo(write, tool, call.args, call.space ?? call.clientId, outcome.result);
          await write
            .exec()
            .catch((err: unknown) =>
              log.warn({ err, callId: call.id }, 'could not cache the result'),
            );
        }
      }
      // The record (the one stored copy, capped at calls.maxResultBytes), audit entry and
      // stats are written in batches alongside; until the record lands, GET /v1/calls reads
      // the ended call as running. The call ends in its queue at once, in one script: its
      // in-flight entry and leases go before the client can send its next call, and a waiting
      // gateway gets the whole outcome (a message, not storage, bounded by the tools' own
      // output limits). A call nobody waits for has its watchers hear of its end with its
      // record: who heard the outcome finds the record.
      const end = events.idle ? events.finish(outcome) : await events.finishWrites(outcome);
      const withRecord = !recorded && call.replyTo === undefined;
      const finished = { call, kind, outcome, ...(withRecord ? { end } : {}) };
      if (durable) await recordReplicated(lane, finished);
      else if (!recorded) recorder.add(finished);
      // A call ended before (recorded) was charged then.
      const charges = recorded
        ? undefined
        : budgets.charges(call, usageOf(call, tool, kind, outcome, ran, meter.take()));
      await queueEnd(end, !withRecord, charges);
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
   * call's claim (its lease in the queue) is on that many replicas. A failover after this point hands the call out again as a restarted one, which
   * the check above turns into `worker_lost` (or the recorded outcome), never into a second
   * run. A WAIT that times out runs the call anyway (counted, logged): the replicas are gone or
   * lagging, and holding every call back would not bring them back. Redis failing over
   * meanwhile leaves it unknown whether the new master knows of this start, so the call is not
   * run here: if the start was lost the new master hands the call out afresh; if not, the call
   * fails with this error.
   */
  async function startReplicated(lane: Lane, call: CallJob): Promise<void> {
    if (!lane.replicas.enabled) return;
    try {
      unreplicated(lane, await lane.replicas.confirm(), 'start');
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
  async function recordReplicated(
    lane: Lane,
    finished: Parameters<Recorder['add']>[0],
  ): Promise<void> {
    try {
      await lane.recorder.now(finished);
      unreplicated(lane, await lane.replicas.confirm(), 'outcome');
    } catch (err) {
      throw new Error(
        `${finished.call.tool} ran, but Redis failed over before its outcome was recorded on a replica`,
        { cause: err },
      );
    }
  }

  function unreplicated(lane: Lane, replication: Replication, step: 'start' | 'outcome'): void {
    if (replication.replicated) return;
    metrics.unreplicated.inc({ step });
    if (Date.now() - lane.unreplicatedWarnedAt < 10_000) return;
    lane.unreplicatedWarnedAt = Date.now();
    lane.log.warn(
      {
        acked: replication.acked,
        wanted: lane.replicas.durability.replicas,
        ms: replication.ms,
        step,
      },
      'non-idempotent calls go on with their start or outcome on the Redis master only: WAIT timed out (toolgate_redis_unreplicated_total)',
    );
  }

  return {
    id,
    async start() {
      if (!shards.sharded) {
        // One Redis: the worker does not start without it.
        await serveLane(homeLane);
        await openCatalog();
        await beatLane(homeLane);
      } else {
        const catalog = openCatalog().catch((err: unknown) =>
          log.warn({ err }, 'the upstream catalog did not open'),
        );
        for (const lane of lanes) {
          starting.set(
            lane,
            startLaneUntilUp(lane, catalog).finally(() => starting.delete(lane)),
          );
        }
        // Serving the shards that answer; one that does not is named and joins once it does.
        await Promise.race([Promise.all(starting.values()), pause(SHARD_START_WAIT_MS)]);
        for (const lane of starting.keys())
          lane.log.warn(
            { afterMs: SHARD_START_WAIT_MS },
            'worker started without this shard: its Redis does not answer yet',
          );
      }
      log.info(
        {
          queues,
          concurrency: config.worker.concurrency,
          sandboxConcurrency: config.worker.sandboxConcurrency,
          sandboxReserve: config.worker.sandboxReserve,
          tools: registry.size,
          ...(shards.sharded ? { shards: lanes.filter((l) => l.up).map((l) => l.shard.id) } : {}),
        },
        'worker started',
      );
    },
    async serveMetrics(
      port?: number,
      host = config.clients.length === 0 ? '127.0.0.1' : config.server.host,
    ) {
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
          res.writeHead(200, { 'content-type': 'application/json' }).end(
            JSON.stringify({
              status: 'ok',
              workerId: id,
              // Which shards it takes calls of (docs/sharding.md#workers).
              ...(shards.sharded
                ? {
                    shards: Object.fromEntries(
                      lanes.map((l) => [l.shard.id, l.up && l.redis.status === 'ready']),
                    ),
                  }
                : {}),
            }),
          );
        } else {
          res.writeHead(404).end();
        }
      });
      const s = metricsServer;
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(listenPort, host, () => {
          s.off('error', reject);
          resolve();
        });
      });
      const address = s.address();
      const bound = typeof address === 'object' && address ? address.port : listenPort;
      log.info({ host, port: bound }, 'worker metrics listening');
      return bound;
    },
    async close() {
      log.info('worker stopping: finishing in-flight calls');
      closing = true;
      // Stopping waits for the calls in progress; tools see shutdown only if they outlive it.
      // A shard that is down is not waited for (its calls' ends wait for it to come back).
      await Promise.all(
        lanes.map((lane) =>
          unlessDown(lane, 'finishing its calls', async () => {
            await Promise.all(lane.consumers.map((c) => c.stop()));
            await lane.sessions?.close();
            await lane.recorder.drain();
          }),
        ),
      );
      shutdown.abort();
      await upstreamCatalog?.close();
      await upstreamCalls?.close();
      // Before the sandbox driver closes (the caller's): each server's sandbox ends here.
      await stdioServers?.close();
      await Promise.all(
        lanes.map((lane) => unlessDown(lane, 'its heartbeat', () => lane.heartbeat.stop())),
      );
      metricsServer?.close();
      for (const lane of lanes) {
        lane.cancelSubscriber.disconnect();
        lane.replicas.close();
        lane.redis.disconnect();
      }
      log.info('worker stopped');
    },
  };
}

/**
 * The credential rules with the store their secrets come from, when any rule is configured.
 * Rules without a secrets key stop the worker at start: every call they cover would fail.
 */
function startCredentials(
  config: Config,
  redis: ReturnType<typeof createRedis>,
  keys: Keys,
):
  | { forCall: (clientId: string, user?: string) => ReturnType<CredentialRules['forCall']> }
  | undefined {
  const rules = new CredentialRules(config.credentials, config.clients);
  if (rules.size === 0) return undefined;
  const ring = KeyRing.load(config.secrets);
  if (!ring) {
    throw new SecretConfigError(
      '/secrets/keyFile',
      'credential rules are configured but no secrets key (secrets.keyFile or TOOLGATE_SECRETS_KEY)',
    );
  }
  const store = new SecretStore(redis, keys, ring);
  return { forCall: (clientId, user) => rules.forCall(store, clientId, user) };
}

/** Live output with the call's injected values taken out (a chunk boundary inside one is not). */
function redactedEvents(events: ToolEvents, used: ReadonlySet<string>): ToolEvents {
  return {
    output: (stream, text) => events.output(stream, redactValues(text, used)),
    progress: (progress, total, message) =>
      events.progress(
        progress,
        total,
        message === undefined ? undefined : redactValues(message, used),
      ),
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
