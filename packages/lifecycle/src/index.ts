/** How a toolgate service process starts and stops: config once, signals, a clean exit. */
import { ConfigError, loadConfig, type Config } from '@toolgate/config';
import { createLogger, type Logger } from '@toolgate/log';
import { shutdownTelemetry } from '@toolgate/telemetry';

/** How long a service may take to finish in-flight work after SIGTERM before it exits anyway. */
const SHUTDOWN_TIMEOUT_MS = 60_000;

/** Where the config comes from: `loadConfig(env, file)` (default: process.env, TOOLGATE_CONFIG). */
export interface ServiceOptions {
  env?: Record<string, string | undefined>;
  /** A config file; overrides TOOLGATE_CONFIG (`toolgate gateway --config FILE`). */
  file?: string;
}

/**
 * Loads and validates the config (a bad one exits 2 with the field named), runs `start`, and
 * on SIGTERM/SIGINT calls the close function it returned, flushes traces and exits 0.
 */
export function runService(
  name: string,
  start: (config: Config, logger: Logger) => Promise<() => Promise<void>>,
  options: ServiceOptions = {},
): void {
  let config: Config;
  try {
    const env = options.env ?? process.env;
    config = loadConfig(env, options.file ?? env.TOOLGATE_CONFIG);
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
        if (stopping) {
          // A second signal: stop waiting.
          logger.warn({ signal }, 'second signal: exiting now');
          process.exit(1);
        }
        stopping = true;
        logger.info({ signal }, 'shutting down: finishing in-flight work');
        // Nothing waits forever (Redis gone, a call that ignores its timeout).
        const deadline = setTimeout(() => {
          logger.error({ timeoutMs: SHUTDOWN_TIMEOUT_MS }, 'shutdown took too long: exiting');
          process.exit(1);
        }, SHUTDOWN_TIMEOUT_MS);
        deadline.unref();
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
