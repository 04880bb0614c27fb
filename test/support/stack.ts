import { randomUUID } from 'node:crypto';
import { parseConfig, type Config } from '@toolgate/config';
import { createGateway, type Gateway } from '@toolgate/gateway';
import { createLogger, type Logger } from '@toolgate/log';
import type { AnyToolSpec, ToolServices } from '@toolgate/registry';
import { createHttpServices, createToolCatalog, createToolRegistry } from '@toolgate/tools';
import { createWorker, openClientStores, type ToolWorker } from '@toolgate/worker';
import { inject } from 'vitest';

export const KEYS = {
  alice: 'alice-key-0123456789abcdef',
  bob: 'bob-key-0123456789abcdef0',
  admin: 'admin-key-0123456789abcdef',
} as const;

export interface Stack {
  url: string;
  /** The gateway's /metrics, on its own listener (server.metricsPort), never on `url`. */
  metricsUrl: string;
  config: Config;
  gateway: Gateway;
  worker: ToolWorker | undefined;
  /** fetch against the gateway with a client's key (default alice). */
  call(
    path: string,
    init?: RequestInit & { key?: string | null; json?: unknown },
  ): Promise<Response>;
  close(): Promise<void>;
}

export interface StackOptions {
  tools?: AnyToolSpec[];
  services?: ToolServices;
  /** Config document overrides (merged over the test defaults). */
  config?: Record<string, unknown>;
  /** Start without a worker (for 503 tests). */
  worker?: boolean;
  /** Where the gateway and worker log (default: silent, or TEST_LOG_LEVEL). */
  logger?: Logger;
  /** The gateway's port (default: any free one); code-mode tests name it in codeMode.gatewayUrl. */
  port?: number;
}

/**
 * A real gateway and worker in this process against the run's Redis, under a fresh key prefix
 * so test files never see each other's queues.
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const config = parseConfig(
    {
      redis: { ...inject('redisTarget'), prefix: `t${randomUUID().slice(0, 8)}` },
      server: { port: 0, host: '127.0.0.1' },
      worker: { metricsPort: 0 },
      log: { level: 'silent' },
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'] },
        { id: 'bob', key: KEYS.bob, tools: ['current_time', 'category:math'] },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      ...options.config,
    },
    {},
  );
  const logger =
    options.logger ??
    createLogger('test', {
      level: (process.env.TEST_LOG_LEVEL as 'silent' | undefined) ?? 'silent',
    });
  const registry = createToolRegistry(options.tools ?? []);
  // As services/worker/src/start.ts: each client's memory on its shard.
  const stores = openClientStores(config);
  const worker =
    options.worker === false
      ? undefined
      : createWorker({
          config,
          registry,
          logger,
          // As services/worker/src/main.ts wires them; tests add the sandbox when they need it.
          services: {
            http: createHttpServices(config.policy.http),
            shellPolicy: config.policy.shell,
            memory: stores.memory,
            toolCatalog: createToolCatalog(registry, config.clients),
            ...options.services,
          } as ToolServices,
        });
  await worker?.start();
  const gateway = createGateway({ config, registry, logger });
  const { port } = await gateway.listen(options.port ?? 0, '127.0.0.1');
  const url = `http://127.0.0.1:${port}`;
  const metricsUrl = `http://127.0.0.1:${await gateway.serveMetrics(0, '127.0.0.1')}/metrics`;
  return {
    url,
    metricsUrl,
    config,
    gateway,
    worker,
    call(path, init = {}) {
      const { key = KEYS.alice, json, headers, ...rest } = init;
      return fetch(url + path, {
        ...rest,
        method: rest.method ?? (json === undefined ? 'GET' : 'POST'),
        headers: {
          ...(key ? { authorization: `Bearer ${key}` } : {}),
          ...(json === undefined ? {} : { 'content-type': 'application/json' }),
          ...(headers as Record<string, string> | undefined),
        },
        ...(json === undefined
          ? {}
          : { body: typeof json === 'string' ? json : JSON.stringify(json) }),
      });
    },
    async close() {
      await gateway.close();
      await worker?.close();
      stores.close();
    },
  };
}
