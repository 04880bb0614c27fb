import {
  Admission,
  Approvals,
  AuditLog,
  Budgets,
  CallEvents,
  CallIndex,
  CallStore,
  ConnectionBudget,
  Dispatcher,
  Keys,
  ReplicaWait,
  ResultCache,
  Series,
  SessionStore,
  Stats,
  StatsBatch,
  WorkspaceResets,
  budgetConfig,
  createRedis,
  liveWorkers,
  queueTelemetry,
  warmSandboxes,
  type RedisClient,
} from '@toolgate/calls';
import type { Config, Shard } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ToolRegistry } from '@toolgate/registry';
import { KeyRing, SecretStore } from '@toolgate/secrets';
import { tracingActive } from '@toolgate/telemetry';
import type { UpstreamCatalog } from '@toolgate/upstreams';
import { Router, type RequestHandler } from 'express';
import { ApprovalFeed } from './approval-feed.js';
import { readJsonBody } from './body/read-json-body.js';
import type { Clients } from './clients.js';
import { HeldConnections } from './held-connections.js';
import { chargeRequests } from './http.js';
import type { GatewayMetrics } from './metrics.js';
import { CallPipeline, markShard } from './pipeline.js';
import type { CallPolicy } from './policy/cedar.js';
import { CallLimits } from './policy/limits.js';
import type { approvalRule } from './policy/approval.js';
import { adminRoutes, workspaceAdminRoutes } from './routes/admin.js';
import { budgetRoutes } from './routes/budget.js';
import { callRoutes } from './routes/calls.js';
import { consoleApi } from './routes/console.js';
import { executeRoutes } from './routes/execute.js';
import { mcpRoutes } from './routes/mcp.js';
import { policyRoutes } from './routes/policy.js';
import { secretRoutes } from './routes/secrets.js';
import { conversationSessions, sessionRoutes } from './routes/sessions.js';
import { statsRoutes } from './routes/stats.js';
import { toolCallRoutes } from './routes/tool-calls.js';
import { toolRoutes } from './routes/tools.js';
import { upstreamRoutes } from './routes/upstreams.js';
import { OriginPolicy } from './mcp/origin.js';

/**
 * How long a call may stay queued before its in-flight entry is taken for a lost one (its
 * worker vanished without saying the call ended); the longest tool timeout is added to it.
 */
const STALE_QUEUE_WAIT_MS = 30 * 60_000;

/** What every shard's stack shares: the gateway's configuration, tools, policies and metrics. */
export interface ShardStackOptions {
  config: Config;
  registry: ToolRegistry;
  log: Logger;
  metrics: GatewayMetrics;
  clients: Clients;
  /** No clients configured: one development key (loopback only). */
  dev: boolean;
  requiresApproval: ReturnType<typeof approvalRule>;
  policy: CallPolicy | undefined;
  upstreams: UpstreamCatalog | undefined;
  /** Aborted when the gateway begins to close: held streams end. */
  closing: AbortSignal;
  /** Where the queue dashboard is, when it is on (the console links to it). */
  queueDashboard: string | undefined;
}

/**
 * Everything of one Redis shard a gateway uses (docs/sharding.md): its connections, the stores
 * and queues on it, the pipeline its clients' calls take, and the router of the routes that
 * serve those clients. A deployment without `redis.shards` has one.
 */
export interface ShardStack {
  shard: Shard;
  redis: RedisClient;
  keys: Keys;
  pipeline: CallPipeline;
  dispatcher: Dispatcher;
  approvals: Approvals;
  audit: AuditLog;
  cache: ResultCache;
  series: Series;
  stats: Stats;
  budgets: Budgets;
  sessions: SessionStore;
  /** Parked, decided and expired calls of this shard's clients, as they happen. */
  feed: ApprovalFeed;
  /** Held connections (event streams) of this shard's clients. */
  held: HeldConnections;
  /** The routes of the clients whose data is on this shard (after authentication). */
  router: Router;
  /** Charges a request to its client's rate on this shard (once per request). */
  charge: RequestHandler;
  /** Expires overdue approvals, samples the console's series, counts cache evictions. */
  sweep(): Promise<void>;
  close(): Promise<void>;
}

/** Opens one shard's stack; `sharded`: its outages are that shard's (503 shard_unavailable). */
export function openShard(shard: Shard, o: ShardStackOptions, sharded: boolean): ShardStack {
  const { config, registry, metrics, clients, policy, upstreams } = o;
  const log = sharded ? o.log.child({ shard: shard.id }) : o.log;
  const keys = Keys.for(shard.redis);
  const redis = createRedis(shard.redis, 'command');
  redis.on('error', (err) => log.debug({ err: err.message }, 'redis error'));
  if (sharded) markShard(redis, shard.id);
  const store = new CallStore(redis, keys, config.calls.ttlSeconds, config.calls.maxResultBytes);
  // One subscriber connection carries this gateway's replies and the events of watched calls.
  const subscriber = createRedis(shard.redis, 'blocking');
  subscriber.on('error', (err) => log.debug({ err: err.message }, 'redis error'));
  // BullMQ's spans (bullmq-otel) when tracing is on: a call's add joins its trace.
  const dispatcher = new Dispatcher(
    redis,
    subscriber,
    keys,
    store,
    queueTelemetry(tracingActive()),
  );
  const events = new CallEvents(redis, subscriber, keys);
  const feed = new ApprovalFeed(redis, subscriber, keys);
  const budgets = new Budgets(redis, keys, budgetConfig(config.clients));
  const approvals = new Approvals(redis, keys, store, config.policy.approval.ttlSeconds);
  const audit = new AuditLog(redis, keys, config.audit);
  const cache = new ResultCache(redis, keys, config.calls.maxResultBytes);
  const series = new Series(redis, keys);
  const callIndex = new CallIndex(redis, keys, config.calls.ttlSeconds);
  const stats = new Stats(redis, keys, { series, index: callIndex });
  const statsBatch = new StatsBatch(redis, stats, (err, calls) =>
    log.warn({ err, calls }, 'could not count the stats of calls answered here'),
  );
  const limits = new CallLimits(redis, keys, config.policy.loopGuard, (kind, client) =>
    metrics.limited.inc({ kind, client: client.id }),
  );
  const longestTimeoutMs = Math.max(
    0,
    ...registry.list().map((t) => t.timeoutMs),
    ...config.upstreams.map((u) => u.timeoutMs + 2000),
  );
  const admission = new Admission(redis, keys, STALE_QUEUE_WAIT_MS + longestTimeoutMs);
  const replicas = new ReplicaWait(shard.redis, keys, shard.redis.durability);
  let unreplicatedWarnedAt = 0;
  const sessions = new SessionStore(redis, keys, config.worker.lostCallTimeoutMs);
  const pipeline = new CallPipeline({
    redis,
    keys,
    budgets,
    store,
    dispatcher,
    events,
    index: callIndex,
    clientIds: [...clients.ids],
    feed,
    registry,
    limits,
    admission,
    approvals,
    audit,
    cache,
    stats,
    statsBatch,
    metrics,
    replicas,
    onUnreplicated(replication) {
      // One line per burst: a replica that is gone times out every call's WAIT.
      if (Date.now() - unreplicatedWarnedAt < 10_000) return;
      unreplicatedWarnedAt = Date.now();
      log.warn(
        { acked: replication.acked, wanted: shard.redis.durability.replicas, ms: replication.ms },
        'calls accepted on the Redis master only: WAIT timed out (toolgate_redis_unreplicated_total)',
      );
    },
    requiresApproval: o.requiresApproval,
    services: { shellPolicy: config.policy.shell },
    syncWaitGraceMs: config.server.syncWaitGraceMs,
    sessions,
    ...(upstreams ? { heldTool: (name: string) => upstreams.held(name) } : {}),
    ...(policy ? { policy } : {}),
  });

  let sampledMinute = 0;
  const queueDepth = async (kind: 'fast' | 'sandbox') => {
    const c = await dispatcher.counts(kind);
    return c.waiting + c.delayed;
  };
  // Housekeeping any gateway may do (each step is safe to race): expire pending approvals,
  // count expired cache entries.
  const sweep = async () => {
    const expired = await approvals.expireOverdue();
    for (const record of expired) {
      metrics.approvalDecisions.inc({ decision: 'expired' });
      await pipeline.ended(record);
      await audit.append(
        audit.entry({
          event: 'approval',
          client: record.clientId,
          tool: record.tool,
          callId: record.id,
          status: 'expired',
          by: 'system',
        }),
      );
    }
    // The console's gauges, once a minute (whichever gateway's sweep comes first writes it).
    const minute = Math.floor(Date.now() / 60_000);
    if (minute !== sampledMinute) {
      sampledMinute = minute;
      const [fast, sandbox, workers, warm] = await Promise.all([
        queueDepth('fast'),
        queueDepth('sandbox'),
        liveWorkers(redis, keys),
        warmSandboxes(redis, keys),
      ]);
      await series.sample({ queueFast: fast, queueSandbox: sandbox, workers, warm });
    }
    const evicted = await cache.sweep();
    if (evicted > 0) {
      metrics.cacheEvictions.inc(evicted);
      const multi = redis.multi();
      stats.countCache(multi, 'evictions', evicted);
      await multi.exec();
    }
  };

  const connectionBudget = new ConnectionBudget(redis, keys, {
    leaseMs: config.calls.events.streamLeaseSeconds * 1000,
  });
  const held = new HeldConnections(
    connectionBudget,
    redis,
    config.calls.events.maxStreamsPerClient,
    o.closing,
  );

  // The routes of this shard's clients, in the order the gateway has always had them.
  const router = Router();
  const charge = chargeRequests(limits, redis, audit);
  router.use(charge); // before the body is read
  router.use(readJsonBody({ limitBytes: config.server.bodyLimitBytes }));
  router.use(executeRoutes(pipeline)); // the hot route first
  router.use(sessionRoutes({ sessions, registry, config: config.sessions, audit }));
  router.use(toolRoutes(registry, o.requiresApproval, policy));
  router.use(policyRoutes({ registry, policy }));
  router.use(
    toolCallRoutes(pipeline, {
      cancelOnDisconnect: config.calls.cancelOnDisconnect,
      conversationSession: conversationSessions({
        sessions,
        registry,
        config: config.sessions,
      }),
      perConversation: config.sessions.perConversation,
    }),
  );
  router.use(
    mcpRoutes({
      registry,
      pipeline,
      requiresApproval: o.requiresApproval,
      origins: new OriginPolicy(config.server.allowedOrigins, o.dev),
      redis,
      keys,
      logger: log,
      syncWaitGraceMs: config.server.syncWaitGraceMs,
      callTtlSeconds: config.calls.ttlSeconds,
      held,
      ...(config.auth.oauth ? { publicOrigin: new URL(config.auth.oauth.audience).origin } : {}),
      ...(policy ? { policy } : {}),
    }),
  );
  router.use(callRoutes(pipeline, { held }));
  router.use(budgetRoutes(redis, budgets, clients.ids));
  router.use(statsRoutes(redis, stats, cache, registry, clients.ids));
  router.use(
    adminRoutes({
      redis,
      approvals,
      audit,
      pipeline,
      metrics,
      feed,
      pendingLimits: clients.pendingLimits,
      held,
    }),
  );
  router.use(upstreamRoutes({ redis, catalog: upstreams }));
  router.use(
    consoleApi({
      redis,
      series,
      registry,
      traceUrl: config.console.traceUrl,
      ...(o.queueDashboard ? { queueDashboard: o.queueDashboard } : {}),
      policies: policy !== undefined,
    }),
  );
  const clientIds = new Set(config.clients.length > 0 ? config.clients.map((c) => c.id) : ['dev']);
  router.use(
    workspaceAdminRoutes({ redis, resets: new WorkspaceResets(redis, keys), clientIds, audit }),
  );
  // Sealed here, opened only by workers: the gateway never reads a value back.
  router.use(
    secretRoutes({
      redis,
      store: new SecretStore(redis, keys, KeyRing.load(config.secrets)),
      audit,
      clientIds,
    }),
  );

  return {
    shard,
    redis,
    keys,
    pipeline,
    dispatcher,
    approvals,
    audit,
    cache,
    series,
    stats,
    budgets,
    sessions,
    feed,
    held,
    router,
    charge,
    sweep,
    async close() {
      await connectionBudget.close();
      await statsBatch.drain();
      await dispatcher.close();
      replicas.close();
      redis.disconnect();
    },
  };
}
