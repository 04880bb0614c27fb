/** The gateway process: config, plugins, HTTP listener, and the development-mode banner. */
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import { loadToolRegistry } from '@toolgate/plugins';
import { createGateway } from './gateway.js';

/**
 * Starts the gateway with a loaded config (what `toolgate gateway` and main.ts run under
 * runService); resolves with its close function.
 */
export async function startGateway(config: Config, logger: Logger): Promise<() => Promise<void>> {
  const registry = await loadToolRegistry(
    config.plugins.dirs,
    logger.child({ component: 'plugins' }),
  );
  const gateway = createGateway({ config, registry, logger });
  const { host, port } = await gateway.listen();
  await gateway.serveMetrics();
  const base = `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host}:${port}`;
  if (gateway.dev) {
    // Printed once, to the terminal only: the development-mode admin key.
    process.stdout.write(
      [
        '',
        'toolgate is running in development mode (no clients configured; loopback only).',
        `  Point your assistant at: ${base}`,
        `  Development admin key:   ${gateway.dev.key}`,
        `  Try: curl -s -H "Authorization: Bearer ${gateway.dev.key}" ${base}/tools/openai`,
        '',
        '',
      ].join('\n'),
    );
  }
  return () => gateway.close();
}
