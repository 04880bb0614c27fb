import type { Server } from 'node:http';
import { CallStore, Dispatcher, Keys, createRedis } from '@toolgate/calls';
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import express from 'express';
import { resolveClients, type DevMode } from './clients.js';
import { authenticate, errorHandler, notFound } from './http.js';
import { createMetrics } from './metrics.js';
import { CallPipeline } from './pipeline.js';
import { callRoutes } from './routes/calls.js';
import { executeRoutes } from './routes/execute.js';
import { healthRoutes } from './routes/health.js';
import { toolCallRoutes } from './routes/tool-calls.js';
import { toolRoutes } from './routes/tools.js';

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
  /** Stops accepting, lets in-flight requests finish, closes Redis. */
  close(): Promise<void>;
}

export function createGateway({ config, registry, logger }: GatewayOptions): Gateway {
  const log = logger.child({ component: 'gateway' });
  const keys = new Keys(config.redis.prefix);
  const redis = createRedis(config.redis.url, 'command');
  redis.on('error', (err) => log.debug({ err: err.message }, 'redis error'));
  const store = new CallStore(redis, keys, config.calls.ttlSeconds);
  const dispatcher = new Dispatcher(
    redis,
    () => createRedis(config.redis.url, 'blocking'),
    keys,
    store,
  );
  const pipeline = new CallPipeline({
    redis,
    keys,
    store,
    dispatcher,
    registry,
    syncWaitGraceMs: config.server.syncWaitGraceMs,
  });
  const { clients, dev } = resolveClients(config);
  const metrics = createMetrics();
  const approvalTools = new Set(config.policy.approval.tools);
  const requiresApproval = (tool: Tool) => tool.requiresApproval || approvalTools.has(tool.name);

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  app.use((req, res, next) => {
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const route = (req.route?.path as string | undefined) ?? 'unmatched';
      metrics.httpRequests.inc({ method: req.method, route, status: String(res.statusCode) });
      if (res.statusCode >= 500)
        log.warn({ method: req.method, path: req.path, status: res.statusCode }, 'request failed');
      else
        log.debug(
          {
            method: req.method,
            path: req.path,
            status: res.statusCode,
            ms: Number(process.hrtime.bigint() - started) / 1e6,
          },
          'request',
        );
    });
    next();
  });
  app.use(healthRoutes(redis, keys));
  app.get('/metrics', async (_req, res) => {
    res.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  app.use(express.json({ limit: config.server.bodyLimitBytes, strict: false, type: () => true }));
  app.use(authenticate(clients));
  app.use(toolRoutes(registry, requiresApproval));
  app.use(executeRoutes(pipeline));
  app.use(toolCallRoutes(pipeline));
  app.use(callRoutes(pipeline));
  app.use(notFound);
  app.use(errorHandler(log));

  let server: Server | undefined;
  return {
    app,
    dev,
    async listen(port = config.server.port, host = dev ? '127.0.0.1' : config.server.host) {
      server = await new Promise<Server>((resolve, reject) => {
        const s = app.listen(port, host, (err?: Error) => (err ? reject(err) : resolve(s)));
      });
      server.keepAliveTimeout = 65_000;
      const address = server.address();
      const bound =
        typeof address === 'object' && address
          ? { host: address.address, port: address.port }
          : { host, port };
      log.info(bound, 'gateway listening');
      return bound;
    },
    async close() {
      if (server) {
        const s = server;
        // Keep-alive connections become idle as their last responses go out: close them then.
        const idle = setInterval(() => s.closeIdleConnections(), 50);
        await new Promise<void>((resolve) => s.close(() => resolve()));
        clearInterval(idle);
      }
      await dispatcher.close();
      redis.disconnect();
    },
  };
}
