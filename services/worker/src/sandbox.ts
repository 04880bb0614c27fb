import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ToolServices } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
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
): Promise<{ sandbox: Sandbox | undefined; services: Partial<ToolServices> }> {
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
  return { sandbox, services: { sandbox, workspaces: createWorkspaces(sandbox.config) } };
}
