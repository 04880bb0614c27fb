/**
 * The MCP logging level a client chose. 2026-07-28 clients send it with every request (the
 * `io.modelcontextprotocol/logLevel` key of `_meta`); 2025-era clients send
 * `logging/setLevel` once, for a session toolgate does not keep. Their level lives in Redis
 * per principal (the client, or one user of it), so whichever gateway answers the next request
 * honours it, and one user's choice never silences another's (docs/mcp.md).
 */
import { principal, type Keys } from '@toolgate/calls';
import type { LoggingLevel } from '@modelcontextprotocol/server';
import type { RedisClient } from '@toolgate/calls';

/** RFC 5424 order, as the MCP spec lists them. */
export const LOG_LEVELS: readonly LoggingLevel[] = [
  'debug',
  'info',
  'notice',
  'warning',
  'error',
  'critical',
  'alert',
  'emergency',
];

/** A level set by `logging/setLevel` outlives idle clients by a day, then falls back. */
const LEVEL_TTL_SECONDS = 86_400;

/** What a 2025-era client that never chose a level gets: tool output, not the chatter. */
export const DEFAULT_LEGACY_LEVEL: LoggingLevel = 'info';

export function isLoggingLevel(value: unknown): value is LoggingLevel {
  return typeof value === 'string' && (LOG_LEVELS as readonly string[]).includes(value);
}

/** True when a message at `level` passes a client's `threshold`. */
export function passes(level: LoggingLevel, threshold: LoggingLevel): boolean {
  return LOG_LEVELS.indexOf(level) >= LOG_LEVELS.indexOf(threshold);
}

/** Whose level: a client (API key), or one user of it (a token's user claim). */
interface Caller {
  id: string;
  user?: string;
}

export class LogLevels {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  async set(caller: Caller, level: LoggingLevel): Promise<void> {
    await this.redis.set(this.key(caller), level, 'EX', LEVEL_TTL_SECONDS);
  }

  async get(caller: Caller): Promise<LoggingLevel> {
    const stored = await this.redis.get(this.key(caller));
    return isLoggingLevel(stored) ? stored : DEFAULT_LEGACY_LEVEL;
  }

  private key(caller: Caller): string {
    return this.keys.mcpLogLevel(principal(caller.id, caller.user));
  }
}
