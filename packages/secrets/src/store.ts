/**
 * The secret store: per owner (a client, or one user of a client) a Redis hash of sealed values
 * and a sorted set of update times (Keys.secrets). Values are write-only through the API: the
 * gateway seals and lists, only the worker opens (`read`), at the moment a rule uses one.
 */
import { LuaScript, type Keys, type RedisClient } from '@toolgate/calls';
import { SecretError } from './errors.js';
import type { KeyRing } from './keyring.js';

/** A secret's name: what `${secret:NAME}` in a credential rule refers to. */
export const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/;
/** Longest value, in UTF-8 bytes. */
export const MAX_SECRET_BYTES = 16 * 1024;
/** Secrets one owner (a client, or one user of a client) may hold. */
export const MAX_SECRETS_PER_OWNER = 256;
/** Longest user (OAuth `sub`) a per-user secret may be filed under. */
export const MAX_USER_CHARS = 256;

export interface SecretListing {
  name: string;
  /** When the value was last set (ISO 8601). */
  updatedAt: string;
}

/** Owner count check and write in one step: two PUTs at once cannot pass the cap together. */
const SET = new LuaScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return -1
end
local created = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[5])
return created
`);

/** Re-seal only the value read: a value set meanwhile is newer and stays. */
const RESEAL = new LuaScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
`);

export function checkSecretName(name: string): void {
  if (!SECRET_NAME.test(name)) {
    throw new SecretError(
      'invalid_secret_name',
      `"${name.slice(0, 80)}" is not a secret name: a letter or "_" first, then letters, digits, "_", "." or "-", at most 64 characters`,
    );
  }
}

export function checkUser(user: string | undefined): void {
  if (user === undefined) return;
  if (user.length === 0 || user.length > MAX_USER_CHARS) {
    throw new SecretError('invalid_user', `user must be 1 to ${MAX_USER_CHARS} characters`);
  }
}

/** What a sealed value is bound to: the same bytes elsewhere in Redis do not open. */
function context(clientId: string, name: string, user: string | undefined): string {
  return `toolgate-secret\n${clientId}\n${user ?? ''}\n${name}`;
}

/** `client` or `client:u:<user, URI-encoded>`, as kept in Keys.secretOwners. */
function ownerOf(clientId: string, user: string | undefined): string {
  return user === undefined ? clientId : `${clientId}:u:${encodeURIComponent(user)}`;
}

function parseOwner(owner: string): { clientId: string; user?: string } {
  const at = owner.indexOf(':u:');
  return at === -1
    ? { clientId: owner }
    : { clientId: owner.slice(0, at), user: decodeURIComponent(owner.slice(at + 3)) };
}

export class SecretStore {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    /** Undefined: no key configured; every operation but listing and deleting refuses. */
    readonly ring: KeyRing | undefined,
  ) {}

  /** Seals and stores `value`. Returns whether the name was new. */
  async set(
    clientId: string,
    name: string,
    value: unknown,
    user?: string,
  ): Promise<{ created: boolean; updatedAt: string }> {
    checkSecretName(name);
    checkUser(user);
    if (typeof value !== 'string' || value.length === 0) {
      throw new SecretError('invalid_secret_value', 'value must be a non-empty string');
    }
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes > MAX_SECRET_BYTES) {
      throw new SecretError(
        'invalid_secret_value',
        `value is ${bytes} bytes; at most ${MAX_SECRET_BYTES} (16 KiB)`,
        { details: { bytes, max: MAX_SECRET_BYTES } },
      );
    }
    const sealed = this.requireRing().seal(value, context(clientId, name, user));
    const { values, times } = this.keys.secrets(clientId, user);
    const now = Date.now();
    const created = await SET.run(
      this.redis,
      [values, times, this.keys.secretOwners],
      [name, sealed, now, MAX_SECRETS_PER_OWNER, ownerOf(clientId, user)],
    );
    if (created === -1) {
      throw new SecretError(
        'too_many_secrets',
        `${user === undefined ? `client "${clientId}"` : `this user of "${clientId}"`} holds ${MAX_SECRETS_PER_OWNER} secrets, the most one owner may; delete one first`,
        { details: { max: MAX_SECRETS_PER_OWNER } },
      );
    }
    return { created: created === 1, updatedAt: new Date(now).toISOString() };
  }

  /** Removes a secret; false when there was none of that name. */
  async delete(clientId: string, name: string, user?: string): Promise<boolean> {
    checkSecretName(name);
    checkUser(user);
    const { values, times } = this.keys.secrets(clientId, user);
    const result = await this.redis.multi().hdel(values, name).zrem(times, name).exec();
    return Number(result?.[0]?.[1] ?? 0) > 0;
  }

  /** Names and update times, oldest first; never values. At most MAX_SECRETS_PER_OWNER. */
  async list(clientId: string, user?: string): Promise<SecretListing[]> {
    checkUser(user);
    const flat = await this.redis.zrange(
      this.keys.secrets(clientId, user).times,
      0,
      MAX_SECRETS_PER_OWNER - 1,
      'WITHSCORES',
    );
    const out: SecretListing[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      out.push({ name: flat[i]!, updatedAt: new Date(Number(flat[i + 1])).toISOString() });
    }
    return out;
  }

  /**
   * The plaintext of a secret (the worker, at use): the user's own where a user is given and
   * has one, else the client's. Undefined when neither is set.
   */
  async read(clientId: string, name: string, user?: string): Promise<string | undefined> {
    checkSecretName(name);
    const ring = this.requireRing();
    for (const owner of user === undefined ? [undefined] : [user, undefined]) {
      const sealed = await this.redis.hget(this.keys.secrets(clientId, owner).values, name);
      if (sealed !== null) return ring.open(sealed, context(clientId, name, owner));
    }
    return undefined;
  }

  /**
   * Re-seals every value not sealed with the current key (`toolgate secrets rotate`), owner by
   * owner. Values whose key is no longer configured are counted, left as they are.
   */
  async rotate(): Promise<{ owners: number; resealed: number; unreadable: number }> {
    const ring = this.requireRing();
    const owners = await this.redis.smembers(this.keys.secretOwners);
    let resealed = 0;
    let unreadable = 0;
    for (const owner of owners) {
      const { clientId, user } = parseOwner(owner);
      const { values } = this.keys.secrets(clientId, user);
      const all = await this.redis.hgetall(values);
      for (const [name, sealed] of Object.entries(all)) {
        if (ring.keyIdOf(sealed) === ring.currentId) continue;
        let plain: string;
        try {
          plain = ring.open(sealed, context(clientId, name, user));
        } catch {
          unreadable++;
          continue;
        }
        const fresh = ring.seal(plain, context(clientId, name, user));
        resealed += Number(await RESEAL.run(this.redis, [values], [name, sealed, fresh]));
      }
    }
    return { owners: owners.length, resealed, unreadable };
  }

  private requireRing(): KeyRing {
    if (!this.ring) {
      throw new SecretError(
        'secrets_disabled',
        'no secrets key is configured (secrets.keyFile or TOOLGATE_SECRETS_KEY)',
      );
    }
    return this.ring;
  }
}
