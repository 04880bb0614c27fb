import { ConfigError, loadConfig } from '@toolgate/config';
import { createLogger } from '@toolgate/log';
import { shutdownTelemetry } from '@toolgate/telemetry';
import { createHttpServices, createToolRegistry } from '@toolgate/tools';
import type { ToolServices } from '@toolgate/registry';
import { createMetrics } from './metrics.js';
import { startSandbox } from './sandbox.js';
import { createWorker } from './worker.js';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`toolgate worker: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  const logger = createLogger('toolgate-worker', { level: config.log.level });
  const registry = createToolRegistry();
  const metrics = createMetrics();
  const { sandbox, services } = await startSandbox(config, logger, metrics);
  const worker = createWorker({
    config,
    registry,
    logger,
    services: {
      ...services,
      http: createHttpServices(config.policy.http),
      shellPolicy: config.policy.shell,
    } as ToolServices,
    metrics,
  });
  await worker.start();
  const port = await worker.serveMetrics();
  if (port !== undefined) logger.info({ port }, 'worker metrics listening');
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    worker
      .close()
      .then(() => sandbox?.close())
      .then(() => shutdownTelemetry())
      .then(
        () => process.exit(0),
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((err: unknown) => {
  console.error('toolgate worker failed to start:', err);
  process.exit(1);
});
