/** How a toolgate service process starts and stops: config once, signals, a clean exit. */
import { ConfigError, loadConfig, type Config } from '@toolgate/config';
import { createLogger, type Logger } from '@toolgate/log';
import { shutdownTelemetry } from '@toolgate/telemetry';

/**
 * Loads and validates the config (a bad one exits 2 with the field named), runs `start`, and
 * on SIGTERM/SIGINT calls the close function it returned, flushes traces and exits 0.
 */
export function runService(
  name: string,
  start: (config: Config, logger: Logger) => Promise<() => Promise<void>>,
): void {
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`${name}: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  const logger = createLogger(name, { level: config.log.level });
  start(config, logger).then(
    (close) => {
      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) return;
        stopping = true;
        logger.info({ signal }, 'shutting down: finishing in-flight work');
        close()
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
    },
    (err: unknown) => {
      logger.fatal({ err }, 'failed to start');
      console.error(`${name} failed to start:`, err);
      process.exit(1);
    },
  );
}
