import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import {
  Admission,
  Budgets,
  budgetConfig,
  Approvals,
  AuditLog,
  CallEvents,
  CallIndex,
  CallStore,
  CodeModeCapabilities,
  Dispatcher,
  queueTelemetry,
  Keys,
  ResultCache,
  Series,
  SessionStore,
  Stats,
  StatsBatch,
  WorkspaceResets,
  createRedis,
  ReplicaWait,
  ConnectionBudget,
  liveWorkers,
  warmSandboxes,
} from '@toolgate/calls';
import { tracingActive } from '@toolgate/telemetry';
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ToolRegistry } from '@toolgate/registry';
import { createGuardedFetch } from '@toolgate/tools';
import { UpstreamCatalog } from '@toolgate/upstreams';
import express from 'express';
import { OAuthResource } from './auth/oauth.js';
import { resolveClients, type DevMode } from './clients.js';
import { deferContinue, readJsonBody } from './body/read-json-body.js';
import { ApiError } from './errors.js';
import { authenticate, chargeRequests, errorHandler, notFound } from './http.js';
import { approvalRule } from './policy/approval.js';
import { AuthFailures } from './policy/auth-failures.js';
import { createMetrics } from './metrics.js';
import { CallPipeline } from './pipeline.js';
import { CallLimits } from './policy/limits.js';
import { CallPolicy } from './policy/cedar.js';
import { PolicyEngine } from '@toolgate/policy';
import { policyRoutes } from './routes/policy.js';
import { adminRoutes, workspaceAdminRoutes } from './routes/admin.js';
import { budgetRoutes } from './routes/budget.js';
import { upstreamRoutes } from './routes/upstreams.js';
import { secretRoutes } from './routes/secrets.js';
import { KeyRing, SecretStore } from '@toolgate/secrets';
import { protectedResourceRoutes } from './routes/well-known.js';
import { QUEUE_BOARD_PATH, queueBoard } from './routes/queue-board.js';
import { ApprovalFeed } from './approval-feed.js';
import { HeldConnections } from './held-connections.js';
import { callRoutes } from './routes/calls.js';
import { codeModeRoutes } from './routes/code-mode.js';
import { consoleApi, consoleDir, consolePages } from './routes/console.js';
import { executeRoutes } from './routes/execute.js';
import { conversationSessions, sessionRoutes } from './routes/sessions.js';
import { healthRoutes } from './routes/health.js';
import { OriginPolicy } from './mcp/origin.js';
import { mcpRoutes } from './routes/mcp.js';
import { statsRoutes } from './routes/stats.js';
import { toolCallRoutes } from './routes/tool-calls.js';
import { toolRoutes } from './routes/tools.js';

/**
 * How long a call may stay queued before its in-flight entry is taken for a lost one (its
 * worker vanished without saying the call ended); the longest tool timeout is added to it.
 */
const STALE_QUEUE_WAIT_MS = 30 * 60_000;

export interface GatewayOptions {
  config: Config;
  registry: ToolRegistry;
  logger: Logger;
}

export interface Gateway {
  app: express.Express;
  dev: DevMode | undefined;
  /** Resolves once listening; returns the bound address. */
  listen(port?: number, host?: string): Promise<{ host: string; port: number }>;
  /**
   * Serves /metrics on a listener of its own (`server.metricsPort`; an explicit 0 binds any
   * free port, the configured 0 means none); returns its port, or undefined when off.
   */
  serveMetrics(port?: number, host?: string): Promise<number | undefined>;
  /** Stops accepting, lets in-flight requests finish, closes Redis. */
  close(): Promise<void>;
}

/** How long close() lets requests in progress finish before it closes their connections. */
const CLOSE_GRACE_MS = 30_000;

export function createGateway({ config, registry, logger }: GatewayOptions): Gateway {
  const log = logger.child({ component: 'gateway' });
  const keys = Keys.for(config.redis);
  const redis = createRedis(config.redis, 'command');
  redis.on('error', (err) => log.debug({ err: err.message }, 'redis error'));
  const store = new CallStore(redis, keys, config.calls.ttlSeconds, config.calls.maxResultBytes);
  // One subscriber connection carries this gateway's replies and the events of watched calls.
  const subscriber = createRedis(config.redis, 'blocking');
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
  const { clients, dev } = resolveClients(config);
  const metrics = createMetrics();
  // Cedar policies (docs/policy.md): a set that does not parse or validate stops the start.
  const cedar = config.policy.cedar;
  const requiresApproval = approvalRule(config.policy.approval, cedar?.destructiveApproval);
  const engine =
    cedar &&
    new PolicyEngine({
      policies: cedar.policies,
      schema: cedar.schema,
      logger: log,
      onReload: (r) => {
        if (!r.ok) metrics.policyReloadFailures.inc();
      },
    });
  engine?.watch();
  const budgets = new Budgets(redis, keys, budgetConfig(config.clients));
  // Policies read the caller's budget use (context.budget; no Redis read without a budget).
  const policy =
    engine &&
    new CallPolicy(engine, metrics, ({ client, user }) => budgets.budgetUse(client, user));
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
  // Upstream tools come and go with their catalogs (docs/upstreams.md); this process reads
  // them into the registry and keeps them current.
  const upstreams =
    config.upstreams.length === 0
      ? undefined
      : UpstreamCatalog.open({
          upstreams: config.upstreams,
          registry,
          redis: config.redis,
          fetch: createGuardedFetch(config.policy.http),
          log: log.child({ component: 'upstreams' }),
          audit: config.audit,
        });
  const longestTimeoutMs = Math.max(
    0,
    ...registry.list().map((t) => t.timeoutMs),
    ...config.upstreams.map((u) => u.timeoutMs + 2000),
  );
  const admission = new Admission(redis, keys, STALE_QUEUE_WAIT_MS + longestTimeoutMs);
  const replicas = new ReplicaWait(config.redis, keys, config.redis.durability);
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
        { acked: replication.acked, wanted: config.redis.durability.replicas, ms: replication.ms },
        'calls accepted on the Redis master only: WAIT timed out (toolgate_redis_unreplicated_total)',
      );
    },
    requiresApproval,
    services: { shellPolicy: config.policy.shell },
    syncWaitGraceMs: config.server.syncWaitGraceMs,
    sessions,
    ...(upstreams ? { heldTool: (name: string) => upstreams.held(name) } : {}),
    ...(policy ? { policy } : {}),
  });
  metrics.setSources({
    async queueDepth() {
      const out: Record<
        string,
        { waiting: number; active: number; delayed: number; failed: number }
      > = {};
      for (const kind of ['fast', 'sandbox'] as const) out[kind] = await dispatcher.counts(kind);
      return out;
    },
    approvalsPending: () => approvals.count(),
    cacheKeys: () => cache.size(),
    workersAlive: () => liveWorkers(redis, keys),
    redisUp: () => redis.status === 'ready',
    budgets: async () =>
      Promise.all(
        [...clients.ids]
          .filter((id) => budgets.has(id))
          .map(async (id) => ({ client: id, use: (await budgets.use(id)).client ?? {} })),
      ),
    policyHash: () => engine?.state().hash,
  });

  // Housekeeping any gateway may do (each step is safe to race): expire pending approvals,
  // count expired cache entries.
  let sampledMinute = 0;
  const queueDepth = async (kind: 'fast' | 'sandbox') => {
    const c = await dispatcher.counts(kind);
    return c.waiting + c.delayed;
  };
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
  const sockets = new Set<Socket>();
  /** Aborted when close() begins. */
  const closing = new AbortController();
  const connectionBudget = new ConnectionBudget(redis, keys, {
    leaseMs: config.calls.events.streamLeaseSeconds * 1000,
  });
  const held = new HeldConnections(
    connectionBudget,
    redis,
    config.calls.events.maxStreamsPerClient,
    closing.signal,
  );
  const sweeper = setInterval(() => {
    if (redis.status === 'ready')
      sweep().catch((err: unknown) => log.debug({ err }, 'sweep failed'));
  }, config.server.sweepIntervalMs);
  sweeper.unref();

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.set('trust proxy', config.server.trustProxy);
  const debug = log.isLevelEnabled('debug');
  app.use((req, res, next) => {
    const started = debug ? performance.now() : 0;
    res.on('finish', () => {
      const route = (req.route?.path as string | undefined) ?? 'unmatched';
      metrics.httpRequests.inc({ method: req.method, route, status: String(res.statusCode) });
      if (res.statusCode >= 500) {
        log.warn({ method: req.method, path: req.path, status: res.statusCode }, 'request failed');
      } else if (debug) {
        const ms = performance.now() - started;
        log.debug({ method: req.method, path: req.path, status: res.statusCode, ms }, 'request');
      }
    });
    next();
  });
  app.use(
    healthRoutes(
      redis,
      keys,
      log,
      upstreams && (() => upstreams.status()),
      upstreams && (() => upstreams.supervisorSummary()),
      engine && (() => engine.state()),
    ),
  );
  app.use(consolePages(consoleDir(config.console.dir)));
  // The series name every client, tool and error code: any tenant could read the others'.
  // They are served on server.metricsPort only (serveMetrics), which stays off the public port.
  app.all('/metrics', () => {
    throw new ApiError('not_found', 'metrics are not served here (see server.metricsPort)');
  });
  const authFailures = new AuthFailures(
    redis,
    keys.authFailures,
    config.policy.authFailures.perMinute,
    () => metrics.limited.inc({ kind: 'auth', client: '(unauthenticated)' }),
  );
  const oauth = config.auth.oauth
    ? new OAuthResource(config.auth.oauth, clients, cedar ? { groupsClaim: cedar.groupsClaim } : {})
    : undefined;
  // Code mode's nested calls carry a script's capability, not a client key (docs/code-mode.md).
  app.use(
    codeModeRoutes({
      failures: authFailures,
      capabilities: new CodeModeCapabilities(redis, keys),
      clients,
      pipeline,
      registry,
      approval: config.codeMode.approval,
      body: readJsonBody({ limitBytes: config.server.bodyLimitBytes }),
      ...(oauth ? { oauth } : {}),
      ...(policy ? { policy } : {}),
    }),
  );
  if (oauth) app.use(protectedResourceRoutes(oauth));
  // BullMQ's dashboard signs its requests in itself (a bearer key or the console's cookie).
  const board = config.server.queueDashboard.enabled
    ? queueBoard({
        redis,
        keys,
        actions: config.server.queueDashboard.actions,
        clients,
        failures: authFailures,
        apiKeys: config.auth.apiKeys,
        log,
        ...(oauth ? { oauth } : {}),
      })
    : undefined;
  if (board) app.use(board.router);
  app.use(
    authenticate(clients, authFailures, {
      apiKeys: config.auth.apiKeys,
      ...(oauth ? { oauth } : {}),
    }),
  );
  app.use(chargeRequests(limits, redis, audit)); // before the body is read
  app.use(readJsonBody({ limitBytes: config.server.bodyLimitBytes }));
  app.use(executeRoutes(pipeline)); // the hot route first
  app.use(sessionRoutes({ sessions, registry, config: config.sessions, audit }));
  app.use(toolRoutes(registry, requiresApproval, policy));
  app.use(policyRoutes({ registry, policy }));
  app.use(
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
  app.use(
    mcpRoutes({
      registry,
      pipeline,
      requiresApproval,
      origins: new OriginPolicy(config.server.allowedOrigins, dev !== undefined),
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
  app.use(callRoutes(pipeline, { held }));
  app.use(budgetRoutes(redis, budgets, clients.ids));
  app.use(statsRoutes(redis, stats, cache, registry, clients.ids));
  app.use(
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
  app.use(upstreamRoutes({ redis, catalog: upstreams }));
  app.use(
    consoleApi({
      redis,
      series,
      registry,
      traceUrl: config.console.traceUrl,
      ...(board ? { queueDashboard: QUEUE_BOARD_PATH } : {}),
      policies: policy !== undefined,
    }),
  );
  const clientIds = new Set(config.clients.length > 0 ? config.clients.map((c) => c.id) : ['dev']);
  app.use(
    workspaceAdminRoutes({ redis, resets: new WorkspaceResets(redis, keys), clientIds, audit }),
  );
  // Sealed here, opened only by workers: the gateway never reads a value back.
  app.use(
    secretRoutes({
      redis,
      store: new SecretStore(redis, keys, KeyRing.load(config.secrets)),
      audit,
      clientIds,
    }),
  );
  app.use(notFound);
  app.use(errorHandler(log));

  let server: Server | undefined;
  let metricsServer: Server | undefined;
  return {
    app,
    dev,
    async listen(port = config.server.port, host = dev ? '127.0.0.1' : config.server.host) {
      // The first listing already has the upstreams' tools (or their first attempt failed).
      await upstreams?.ready();
      server = await new Promise<Server>((resolve, reject) => {
        const s = createServer(app);
        deferContinue(s); // before the first connection
        s.once('error', reject);
        s.listen(port, host, () => {
          s.off('error', reject);
          resolve(s);
        });
      });
      server.keepAliveTimeout = 65_000;
      server.on('connection', (socket) => {
        sockets.add(socket);
        socket.once('close', () => sockets.delete(socket));
      });
      const address = server.address();
      const bound =
        typeof address === 'object' && address
          ? { host: address.address, port: address.port }
          : { host, port };
      log.info(bound, 'gateway listening');
      return bound;
    },
    async serveMetrics(port, host = dev ? '127.0.0.1' : config.server.host) {
      if (port === undefined && config.server.metricsPort === 0) return undefined;
      const s = createServer((req, res) => {
        if (req.method === 'GET' && req.url?.split('?')[0] === '/metrics') {
          metrics.registry.metrics().then(
            (text) =>
              res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
            () => res.writeHead(500).end(),
          );
        } else res.writeHead(404).end();
      });
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(port ?? config.server.metricsPort, host, () => {
          s.off('error', reject);
          resolve();
        });
      });
      metricsServer = s;
      const address = s.address();
      const bound =
        typeof address === 'object' && address ? address.port : config.server.metricsPort;
      log.info({ host, port: bound }, 'gateway metrics listening');
      return bound;
    },
    async close() {
      clearInterval(sweeper);
      engine?.close();
      await upstreams?.close();
      metricsServer?.close();
      closing.abort(); // event streams end; their clients reconnect to another gateway
      if (server) {
        const s = server;
        // Keep-alive connections become idle as their last responses go out: close them then,
        // and connections that never sent a request (HTTP clients open spare ones) at once.
        // Requests still running after CLOSE_GRACE_MS are cut off.
        const idle = setInterval(() => {
          s.closeIdleConnections();
          for (const socket of sockets) if (socket.bytesRead === 0) socket.destroy();
        }, 50);
        const force = setTimeout(() => s.closeAllConnections(), CLOSE_GRACE_MS);
        await new Promise<void>((resolve) => s.close(() => resolve()));
        clearInterval(idle);
        clearTimeout(force);
      }
      await connectionBudget.close();
      await statsBatch.drain();
      await dispatcher.close();
      await board?.close();
      replicas.close();
      redis.disconnect();
    },
  };
}
