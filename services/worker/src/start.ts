/** The worker process: plugins, sandbox driver, queues, metrics, and how it drains. */
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import { loadToolRegistry } from '@toolgate/plugins';
import type { ToolServices } from '@toolgate/registry';
import { createHttpServices, createToolCatalog } from '@toolgate/tools';
import { openClientStores } from './client-stores.js';
import { createMetrics } from './metrics.js';
import { startSandbox } from './sandbox.js';
import { createWorker, newWorkerId } from './worker.js';

/** How long SIGTERM waits for in-flight calls (the process exits at 60 s regardless). */
const DRAIN_MS = 45_000;

/**
 * Starts a worker on `config.worker.queues` (what `toolgate worker` and main.ts run under
 * runService); resolves with its close function, which drains in-flight calls.
 */
export async function startWorker(config: Config, logger: Logger): Promise<() => Promise<void>> {
  const registry = await loadToolRegistry(
    config.plugins.dirs,
    logger.child({ component: 'plugins' }),
  );
  const metrics = createMetrics();
  const id = newWorkerId();
  const stores = openClientStores(config);
  // A worker that does not consume the sandbox queue never starts a sandbox driver.
  const {
    sandbox,
    stopWorkspaces,
    services: sandboxServices,
  } = config.worker.queues.includes('sandbox')
    ? await startSandbox(config, logger, metrics, {
        ...stores.home,
        workerId: id,
        resets: stores.resets,
      })
    : { sandbox: undefined, services: {} };
  const services = {
    ...sandboxServices,
    http: createHttpServices(config.policy.http),
    shellPolicy: config.policy.shell,
    memory: stores.memory,
    toolCatalog: createToolCatalog(registry, config.clients),
  } as ToolServices;
  const worker = createWorker({
    config,
    registry,
    logger,
    services,
    metrics,
    queues: config.worker.queues,
    id,
    onLostCalls: () => {
      void sandbox?.reap?.().catch((err: unknown) => logger.warn({ err }, 'reap failed'));
    },
  });
  await worker.start();
  await worker.serveMetrics();
  return async () => {
    // The warm pool first: nothing new will use it, and a worker killed while it waits for
    // its calls (an orchestrator's grace period ending) would leave it behind.
    await sandbox
      ?.drainWarm?.()
      .catch((err: unknown) => logger.warn({ err }, 'could not remove the warm pool'));
    // In-flight calls get DRAIN_MS to finish; with Redis gone the queue may never let go, and
    // the sandbox's containers must still be removed before the process exits.
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      worker.close().then(() => true),
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), DRAIN_MS))),
    ]);
    clearTimeout(timer);
    if (!drained) logger.warn({ drainMs: DRAIN_MS }, 'in-flight calls did not finish in time');
    await sandbox?.close();
    stopWorkspaces?.();
    stores.close();
  };
}
