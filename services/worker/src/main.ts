import { createRedis } from '@toolgate/calls';
import { runService } from '@toolgate/lifecycle';
import { loadToolRegistry } from '@toolgate/plugins';
import type { ToolServices } from '@toolgate/registry';
import { createHttpServices, createMemoryStore, createToolCatalog } from '@toolgate/tools';
import { createMetrics } from './metrics.js';
import { startSandbox } from './sandbox.js';
import { createWorker } from './worker.js';

runService('toolgate-worker', async (config, logger) => {
  const registry = await loadToolRegistry(
    config.plugins.dirs,
    logger.child({ component: 'plugins' }),
  );
  const metrics = createMetrics();
  // A worker that does not consume the sandbox queue never starts a sandbox driver.
  const { sandbox, services: sandboxServices } = config.worker.queues.includes('sandbox')
    ? await startSandbox(config, logger, metrics)
    : { sandbox: undefined, services: {} };
  const memoryRedis = createRedis(config.redis.url, 'command');
  const services = {
    ...sandboxServices,
    http: createHttpServices(config.policy.http),
    shellPolicy: config.policy.shell,
    memory: createMemoryStore(memoryRedis, { prefix: config.redis.prefix }),
    toolCatalog: createToolCatalog(registry, config.clients),
  } as ToolServices;
  const worker = createWorker({
    config,
    registry,
    logger,
    services,
    metrics,
    queues: config.worker.queues,
  });
  await worker.start();
  const port = await worker.serveMetrics();
  if (port !== undefined) logger.info({ port }, 'worker metrics listening');
  return async () => {
    await worker.close();
    await sandbox?.close();
    memoryRedis.disconnect();
  };
});
