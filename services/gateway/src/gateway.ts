import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { CodeModeCapabilities, liveWorkers } from '@toolgate/calls';
import { ShardMap, type Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import { PolicyEngine } from '@toolgate/policy';
import type { ToolRegistry } from '@toolgate/registry';
import { createGuardedFetch } from '@toolgate/tools';
import { UpstreamCatalog } from '@toolgate/upstreams';
import express from 'express';
import { OAuthResource } from './auth/oauth.js';
import { deferContinue, readJsonBody } from './body/read-json-body.js';
import { resolveClients, type DevMode } from './clients.js';
import { ApiError } from './errors.js';
import { authenticate, clientOf, errorHandler, notFound } from './http.js';
import { createMetrics } from './metrics.js';
import { approvalRule } from './policy/approval.js';
import { AuthFailures } from './policy/auth-failures.js';
import { CallPolicy } from './policy/cedar.js';
import { codeModeRoutes } from './routes/code-mode.js';
import { consoleDir, consolePages } from './routes/console.js';
import { healthRoutes } from './routes/health.js';
import { QUEUE_BOARD_PATH, queueBoard } from './routes/queue-board.js';
import { shardAdminRoutes } from './routes/shard-admin.js';
import { protectedResourceRoutes } from './routes/well-known.js';
import { shardMoveRoutes } from './routes/shard-moves.js';
import { openShard, type ShardStack } from './shard-stack.js';
import { ShardMoves } from './shard-moves.js';

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
  // The shards (docs/sharding.md): each client's data and calls on one; deployment-wide data
  // (upstream catalogs, code-mode capabilities, failed sign-ins) on the home one.
  const shardMap = new ShardMap(config);
  const homeRedisConfig = shardMap.home.redis;
  // Policies read the caller's budget use (context.budget; no Redis read without a budget).
  const policy =
    engine &&
    new CallPolicy(engine, metrics, ({ client, user }) =>
      stackOf(client).budgets.budgetUse(client, user),
    );
  // Upstream tools come and go with their catalogs (docs/upstreams.md); this process reads
  // them into the registry and keeps them current.
  const upstreams =
    config.upstreams.length === 0
      ? undefined
      : UpstreamCatalog.open({
          upstreams: config.upstreams,
          registry,
          redis: homeRedisConfig,
          fetch: createGuardedFetch(config.policy.http),
          log: log.child({ component: 'upstreams' }),
          audit: config.audit,
        });
  /** Aborted when close() begins. */
  const closing = new AbortController();
  const stackOptions = {
    config,
    registry,
    log,
    metrics,
    clients,
    dev: dev !== undefined,
    requiresApproval,
    policy,
    upstreams,
    closing: closing.signal,
    queueDashboard: config.server.queueDashboard.enabled ? QUEUE_BOARD_PATH : undefined,
  };
  const stacks = new Map(
    shardMap.list.map((shard) => [shard.id, openShard(shard, stackOptions, shardMap.sharded)]),
  );
  // Where moves put clients, and the moves this gateway runs (docs/sharding.md).
  const moves = new ShardMoves({
    shardMap,
    stacks,
    clientIds: clients.ids,
    log: log.child({ component: 'shard-moves' }),
    drainTimeoutMs:
      Math.max(
        0,
        ...registry.list().map((t) => t.timeoutMs),
        ...config.upstreams.map((u) => u.timeoutMs + 2000),
      ) + 30_000,
  });
  /** The stack of the shard a client's data lives on. */
  function stackOf(clientId: string): ShardStack {
    return stacks.get(moves.shardOf(clientId).id)!;
  }
  const all = [...stacks.values()];
  const home = stacks.get(shardMap.home.id)!;
  const redis = home.redis;
  const keys = home.keys;
  const sum = async (each: (stack: ShardStack) => Promise<number>) =>
    (await Promise.all(all.map(each))).reduce((a, b) => a + b, 0);
  metrics.setSources({
    async queueDepth() {
      const out: Record<
        string,
        { waiting: number; active: number; delayed: number; failed: number }
      > = {};
      for (const kind of ['fast', 'sandbox'] as const) {
        const counts = await Promise.all(all.map((s) => s.dispatcher.counts(kind)));
        out[kind] = counts.reduce((a, c) => ({
          waiting: a.waiting + c.waiting,
          active: a.active + c.active,
          delayed: a.delayed + c.delayed,
          failed: a.failed + c.failed,
        }));
      }
      return out;
    },
    approvalsPending: () => sum((s) => s.approvals.count()),
    cacheKeys: () => sum((s) => s.cache.size()),
    // Workers serve every shard: the fewest any shard sees is how many serve them all.
    workersAlive: async () =>
      Math.min(...(await Promise.all(all.map((s) => liveWorkers(s.redis, s.keys))))),
    redisUp: () => all.every((s) => s.redis.status === 'ready'),
    ...(shardMap.sharded
      ? { shardsUp: () => all.map((s) => ({ shard: s.shard.id, up: s.redis.status === 'ready' })) }
      : {}),
    budgets: async () =>
      Promise.all(
        [...clients.ids]
          .filter((id) => stackOf(id).budgets.has(id))
          .map(async (id) => ({
            client: id,
            use: (await stackOf(id).budgets.use(id)).client ?? {},
          })),
      ),
    policyHash: () => engine?.state().hash,
  });

  const sockets = new Set<Socket>();
  const sweeper = setInterval(() => {
    for (const stack of all)
      if (stack.redis.status === 'ready')
        stack.sweep().catch((err: unknown) => log.debug({ err }, 'sweep failed'));
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
      all.map((s) => ({ id: s.shard.id, redis: s.redis, keys: s.keys })),
      shardMap.sharded,
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
      pipelineOf: (clientId: string) => stackOf(clientId).pipeline,
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
        shards: all.map((s) => ({ id: s.shard.id, redis: s.redis, keys: s.keys })),
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
  // Admin views span the shards; each client's routes run on its shard's stack, and a moving
  // client's wait for its new one (docs/sharding.md).
  app.use(shardMoveRoutes(moves, readJsonBody({ limitBytes: config.server.bodyLimitBytes })));
  if (shardMap.sharded)
    app.use(
      shardAdminRoutes({
        stacks: all,
        stackOf,
        clientIds: config.clients.length > 0 ? config.clients.map((c) => c.id) : ['dev'],
        pendingLimits: clients.pendingLimits,
        registry,
      }),
    );
  app.use((req, res, next) => {
    const id = clientOf(res).id;
    moves.hold(id).then(() => stackOf(id).router(req, res, next), next);
  });
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
      await board?.close();
      await moves.close();
      await Promise.all(all.map((stack) => stack.close()));
    },
  };
}
