import { createLogger } from '@toolgate/log';
import type { ToolServices } from '@toolgate/registry';
import { createToolRegistry } from '@toolgate/tools';
import { createWorker, type ToolWorker } from '@toolgate/worker';
import { startStack, type Stack } from './stack.js';

/**
 * A gateway, and a worker that takes the `fast` queue only: the gateway accepts calls (a
 * worker is alive) and a sandboxed call waits in the `sandbox` queue until someone looks.
 */
export async function withoutSandboxWorker(
  config: Record<string, unknown> = {},
): Promise<{ stack: Stack; worker: ToolWorker }> {
  const stack = await startStack({ worker: false, config });
  const worker = createWorker({
    config: stack.config,
    registry: createToolRegistry(),
    logger: createLogger('test', { level: 'silent' }),
    services: {} as ToolServices,
    queues: ['fast'],
  });
  await worker.start();
  return { stack, worker };
}
