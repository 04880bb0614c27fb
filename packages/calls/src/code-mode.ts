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
  /** The user the script's call acted for: its nested calls act for that user too. */
  user?: string;
  /**
   * The scopes of the OAuth token the script's call was made with: its nested calls get that
   * token's grant, not the whole client's. Absent: the script was started with an API key.
   */
  scopes?: string[];
  /**
   * The token's groups (`policy.cedar.groupsClaim`): the policies decide the nested calls with
   * them, as they decided the script's call.
   */
  groups?: string[];
}

/** A capability's user is at most this long (the gateway refuses longer user claims). */
export const MAX_GRANT_USER_CHARS = 256;
/** A capability's scopes, as JSON, are at most this long (only configured scopes are kept). */
export const MAX_GRANT_SCOPES_BYTES = 4096;
/**
 * A capability's groups: at most this many, each at most MAX_GRANT_USER_CHARS long (the bounds
 * the gateway puts on a token's groups claim). Past them the script does not start: a cut list
 * could drop a group a forbid names.
 */
export const MAX_GRANT_GROUPS = 256;

/** The identity fields of a capability's hash, checked against the bounds above. */
function identityFields(grant: CodeModeGrant): Record<string, string> {
  const fields: Record<string, string> = {};
  if (grant.user !== undefined) {
    if (grant.user.length > MAX_GRANT_USER_CHARS)
      throw new RangeError(`a code-mode user is at most ${MAX_GRANT_USER_CHARS} characters`);
    fields.user = grant.user;
  }
  if (grant.scopes !== undefined) {
    const json = JSON.stringify(grant.scopes);
    if (Buffer.byteLength(json) > MAX_GRANT_SCOPES_BYTES)
      throw new RangeError(`code-mode scopes are at most ${MAX_GRANT_SCOPES_BYTES} bytes as JSON`);
    fields.scopes = json;
  }
  if (grant.groups !== undefined) {
    if (
      grant.groups.length > MAX_GRANT_GROUPS ||
      grant.groups.some((g) => g.length > MAX_GRANT_USER_CHARS)
    )
      throw new RangeError(
        `code-mode groups are at most ${MAX_GRANT_GROUPS} names of at most ${MAX_GRANT_USER_CHARS} characters`,
      );
    fields.groups = JSON.stringify(grant.groups);
  }
  return fields;
}

/** A grant from the hash's fields (HMGET order: client, parent, user, scopes, groups). */
function grantOf(
  client: string,
  parent: string,
  user: string | null | undefined,
  scopes: string | null | undefined,
  groups: string | null | undefined,
): CodeModeGrant {
  return {
    clientId: client,
    parentCallId: parent,
    ...(user ? { user } : {}),
    ...(scopes ? { scopes: JSON.parse(scopes) as string[] } : {}),
    ...(groups ? { groups: JSON.parse(groups) as string[] } : {}),
  };
}

export type CodeModeTake =
  | { ok: true; grant: CodeModeGrant; remaining: number }
  | { ok: false; reason: 'unknown' | 'exhausted' };

/**
 * The check and the decrement in one script: two nested calls arriving at once on two gateways
 * never both take the last one.
 */
const TAKE = new LuaScript(`
local v = redis.call('HMGET', KEYS[1], 'client', 'parent', 'remaining', 'user', 'scopes', 'groups')
if not v[1] then return {0} end
local remaining = tonumber(v[3])
if remaining <= 0 then return {-1} end
redis.call('HINCRBY', KEYS[1], 'remaining', -1)
return {1, v[1], v[2], remaining - 1, v[4] or '', v[5] or '', v[6] or ''}
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
      .hset(key, {
        client: grant.clientId,
        parent: grant.parentCallId,
        remaining: maxCalls,
        ...identityFields(grant),
      })
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
      string?,
      string?,
      string?,
    ];
    if (got[0] === 0) return { ok: false, reason: 'unknown' };
    if (got[0] === -1) return { ok: false, reason: 'exhausted' };
    return {
      ok: true,
      grant: grantOf(got[1]!, got[2]!, got[4], got[5], got[6]),
      remaining: Number(got[3]),
    };
  }

  /** Whose capability this is, without taking a call (listings, help). */
  async peek(token: string): Promise<CodeModeGrant | undefined> {
    if (!token.startsWith('tgcm_') || token.length > 100) return undefined;
    const [client, parent, user, scopes, groups] = await this.redis.hmget(
      this.keys.codeModeCapability(digest(token)),
      'client',
      'parent',
      'user',
      'scopes',
      'groups',
    );
    return client && parent ? grantOf(client, parent, user, scopes, groups) : undefined;
  }

  /** The script ended: its token is worthless from now on. */
  async revoke(token: string): Promise<void> {
    await this.redis.del(this.keys.codeModeCapability(digest(token)));
  }
}

function digest(token: string): string {
  return createHash('sha256').update(token).digest('base64url');
}
