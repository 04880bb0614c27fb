import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/** Paths never written to logs: keys, tokens, secrets, authorization headers. */
export const REDACT_PATHS = [
  'key',
  'apiKey',
  'token',
  'password',
  'secret',
  'authorization',
  '*.key',
  '*.apiKey',
  '*.token',
  '*.password',
  '*.secret',
  '*.authorization',
  'req.headers.authorization',
  'headers.authorization',
];

/**
 * JSON-lines logger for a service; components take `logger.child({ component })`. `destination`
 * defaults to stdout (tests pass a stream to read what was logged).
 */
export function createLogger(
  service: string,
  options: LoggerOptions = {},
  destination?: DestinationStream,
): Logger {
  const settings = {
    name: service,
    level: 'info',
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    ...options,
  };
  return destination ? pino(settings, destination) : pino(settings);
}
