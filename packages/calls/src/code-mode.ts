/**
 * Code mode's capabilities (docs/code-mode.md): what lets a worker make nested calls for one
 * running script. The worker mints one per script and keeps the token to itself (the sandbox
 * never sees it); a gateway takes one nested call from it per request. Stored under the
 * token's digest, so the Redis data alone cannot be used to call anything.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Keys } from './keys.js';
import type { RedisClient } from './redis.js';
import { LuaScript } from './script.js';

/** Who a script's nested calls are for, and how many it may still make. */
export interface CodeModeGrant {
  clientId: string;
  /** The script's call: the nested calls' parent and their conversation (loop guard). */
  parentCallId: string;
}

export type CodeModeTake =
  | { ok: true; grant: CodeModeGrant; remaining: number }
  | { ok: false; reason: 'unknown' | 'exhausted' };

/**
 * The check and the decrement in one script: two nested calls arriving at once on two gateways
 * never both take the last one.
 */
const TAKE = new LuaScript(`
local v = redis.call('HMGET', KEYS[1], 'client', 'parent', 'remaining')
if not v[1] then return {0} end
local remaining = tonumber(v[3])
if remaining <= 0 then return {-1} end
redis.call('HINCRBY', KEYS[1], 'remaining', -1)
return {1, v[1], v[2], remaining - 1}
`);

export class CodeModeCapabilities {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /** A new capability for `maxCalls` nested calls, gone after `ttlSeconds` (the script's limit). */
  async mint(grant: CodeModeGrant, maxCalls: number, ttlSeconds: number): Promise<string> {
    const token = `tgcm_${randomBytes(24).toString('base64url')}`;
    const key = this.keys.codeModeCapability(digest(token));
    await this.redis
      .multi()
      .hset(key, { client: grant.clientId, parent: grant.parentCallId, remaining: maxCalls })
      .expire(key, Math.max(1, Math.ceil(ttlSeconds)))
      .exec();
    return token;
  }

  /** Takes one nested call: the grant, or why not (unknown or expired token, none left). */
  async take(token: string): Promise<CodeModeTake> {
    if (!token.startsWith('tgcm_') || token.length > 100) return { ok: false, reason: 'unknown' };
    const got = (await TAKE.run(this.redis, [this.keys.codeModeCapability(digest(token))], [])) as [
      number,
      string?,
      string?,
      number?,
    ];
    if (got[0] === 0) return { ok: false, reason: 'unknown' };
    if (got[0] === -1) return { ok: false, reason: 'exhausted' };
    return {
      ok: true,
      grant: { clientId: got[1]!, parentCallId: got[2]! },
      remaining: Number(got[3]),
    };
  }

  /** Whose capability this is, without taking a call (listings, help). */
  async peek(token: string): Promise<CodeModeGrant | undefined> {
    if (!token.startsWith('tgcm_') || token.length > 100) return undefined;
    const [client, parent] = await this.redis.hmget(
      this.keys.codeModeCapability(digest(token)),
      'client',
      'parent',
    );
    return client && parent ? { clientId: client, parentCallId: parent } : undefined;
  }

  /** The script ended: its token is worthless from now on. */
  async revoke(token: string): Promise<void> {
    await this.redis.del(this.keys.codeModeCapability(digest(token)));
  }
}

function digest(token: string): string {
  return createHash('sha256').update(token).digest('base64url');
}
