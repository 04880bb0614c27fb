import { Keys, WorkspaceResets, createRedis } from '@toolgate/calls';
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ToolServices } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox, type Workspaces } from '@toolgate/sandbox';
import { SpanKind, withSpan } from '@toolgate/telemetry';
import type { WorkerMetrics } from './metrics.js';

/**
 * Starts the sandbox driver the config asks for and returns the services sandboxed tools use.
 * Without a usable driver the worker still runs: sandboxed calls then end with a readable
 * `sandbox_error` instead of waiting in the queue.
 */
export async function startSandbox(
  config: Config,
  logger: Logger,
  metrics: WorkerMetrics,
): Promise<{
  sandbox: Sandbox | undefined;
  /** Stops workspace retention and its Redis connection (after the sandbox is closed). */
  stopWorkspaces?: () => void;
  services: Partial<ToolServices>;
}> {
  const log = logger.child({ component: 'sandbox' });
  let sandbox: Sandbox;
  try {
    sandbox = await createSandbox(config.sandbox, { logger: log, hooks: metrics.sandboxHooks() });
  } catch (err) {
    log.error({ err }, 'no sandbox driver could start; sandboxed tools will answer sandbox_error');
    return { sandbox: undefined, services: {} };
  }
  metrics.setWarmSource(() => sandbox.stats().warm);
  // One span per sandboxed run, under the worker's toolgate.execute span.
  const run = sandbox.run.bind(sandbox);
  sandbox.run = (request) =>
    withSpan(
      'sandbox.run',
      {
        kind: SpanKind.INTERNAL,
        attributes: { 'sandbox.image': request.image, 'sandbox.driver': sandbox.name },
      },
      async (span) => {
        const result = await run(request);
        span.setAttributes({
          'sandbox.exit_code': result.exitCode,
          'sandbox.timed_out': result.timedOut,
          'sandbox.warm': result.warm,
        });
        return result;
      },
    );
  log.info({ driver: sandbox.name, images: Object.keys(sandbox.config.images) }, 'sandbox ready');
  const { workspaces, stop } = startWorkspaces(config, sandbox, logger);
  return { sandbox, stopWorkspaces: stop, services: { sandbox, workspaces } };
}

/**
 * Workspaces with each client's quota, admin resets read from Redis, and retention on the
 * reaper's interval (the same on both drivers, so not inside either). close() stops it.
 */
function startWorkspaces(
  config: Config,
  sandbox: Sandbox,
  logger: Logger,
): { workspaces: Workspaces; stop: () => void } {
  const sizes = new Map(
    config.clients.flatMap((c) =>
      c.limits.workspaceMb === undefined ? [] : [[c.id, c.limits.workspaceMb] as const],
    ),
  );
  const redis = createRedis(config.redis.url, 'command');
  const resets = new WorkspaceResets(redis, new Keys(config.redis.prefix));
  const workspaces = createWorkspaces(sandbox.config, {
    sizeMbFor: (clientId) => sizes.get(clientId),
    resets,
    logger: logger.child({ component: 'workspaces' }),
  });
  // Retention is in days: a pass a minute is plenty, whatever the container reaper does.
  workspaces.startReaper(Math.max(sandbox.config.reaper.intervalMs, 60_000));
  return {
    workspaces,
    stop: () => {
      workspaces.close();
      redis.disconnect();
    },
  };
}
