import { ConfigError, loadConfig } from '@toolgate/config';
import { createLogger } from '@toolgate/log';
import { shutdownTelemetry } from '@toolgate/telemetry';
import { createToolRegistry } from '@toolgate/tools';
import { createGateway } from './gateway.js';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`toolgate gateway: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  const logger = createLogger('toolgate-gateway', { level: config.log.level });
  const registry = createToolRegistry();
  const gateway = createGateway({ config, registry, logger });
  const { host, port } = await gateway.listen();
  const base = `http://${host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host}:${port}`;
  if (gateway.dev) {
    // Printed once, to the terminal only: the development-mode admin key.
    console.log(
      [
        '',
        'toolgate is running in development mode (no clients configured; loopback only).',
        `  Point your assistant at: ${base}`,
        `  Development admin key:   ${gateway.dev.key}`,
        `  Try: curl -s -H "Authorization: Bearer ${gateway.dev.key}" ${base}/tools/openai`,
        '',
      ].join('\n'),
    );
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down: finishing in-flight requests');
    gateway
      .close()
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
  console.error('toolgate gateway failed to start:', err);
  process.exit(1);
});
