import { createHash } from 'node:crypto';
import type { RedisClient } from './redis.js';

/**
 * A Lua script run by its SHA1 (EVALSHA), loaded with EVAL the first time a server does not
 * know it (NOSCRIPT, e.g. after a restart or on a new replica). One round trip in steady state.
 */
export class LuaScript {
  private readonly sha: string;

  constructor(private readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  async run(redis: RedisClient, keys: string[], args: (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      return redis.eval(this.source, keys.length, ...keys, ...args);
    }
  }
}
