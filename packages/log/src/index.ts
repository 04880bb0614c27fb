import { pino, type Logger, type LoggerOptions } from 'pino';

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

/** JSON-lines logger for a service; components take `logger.child({ component })`. */
export function createLogger(service: string, options: LoggerOptions = {}): Logger {
  return pino({
    name: service,
    level: 'info',
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    ...options,
  });
}
