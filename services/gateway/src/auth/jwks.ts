/**
 * The authorization server's signing keys (its JWKS), held in memory. A token naming a key
 * this cache does not hold (`kid`) makes it fetch the set again — that is how a key rotation
 * reaches toolgate — but at most once per `cooldownMs`, so a flood of tokens with made-up
 * `kid`s costs one request to the server per cooldown, not one each. The set is also read again
 * after `maxAgeMs` (a revoked key stops working within that time) and is bounded: at most
 * MAX_JWKS_BYTES of JSON and MAX_KEYS keys.
 */
import { createLocalJWKSet, errors, type JSONWebKeySet, type JWTVerifyGetKey } from 'jose';
import { AuthServerError, fetchJson } from './fetch-json.js';

export const MAX_JWKS_BYTES = 256 * 1024;
export const MAX_KEYS = 100;
export const JWKS_COOLDOWN_MS = 30_000;
export const JWKS_MAX_AGE_MS = 10 * 60_000;
/** With no keys yet, how long a failed fetch is answered from memory. */
const FAILED_RETRY_MS = 5000;

export class JwksCache {
  private keys: JWTVerifyGetKey | undefined;
  private fetchedAt = 0;
  private inFlight: Promise<void> | undefined;
  private failure: AuthServerError | undefined;
  /** How many times the set was fetched (tests and the log read it). */
  fetches = 0;

  constructor(
    private readonly uri: () => Promise<string>,
    private readonly options: { cooldownMs?: number; maxAgeMs?: number } = {},
  ) {}

  /** A key getter for `jwtVerify`: the cached set, refreshed on an unknown `kid` (bounded). */
  readonly getKey: JWTVerifyGetKey = async (header, token) => {
    const now = Date.now();
    // The server was unreachable a moment ago: answer from that, not with another request.
    if (!this.keys && this.failure && now - this.fetchedAt < FAILED_RETRY_MS) throw this.failure;
    if (!this.keys) await this.refresh();
    else if (now - this.fetchedAt > (this.options.maxAgeMs ?? JWKS_MAX_AGE_MS)) {
      // Due for a re-read: with the server unreachable, the keys held still serve (a token
      // signed with one of them is no less valid because the server is down).
      await this.refresh().catch(() => undefined);
    }
    try {
      return await this.keys!(header, token);
    } catch (err) {
      if (!(err instanceof errors.JWKSNoMatchingKey)) throw err;
      if (Date.now() - this.fetchedAt < (this.options.cooldownMs ?? JWKS_COOLDOWN_MS)) throw err;
      await this.refresh();
      return this.keys!(header, token);
    }
  };

  /** One fetch at a time; callers arriving meanwhile wait for it. */
  private refresh(): Promise<void> {
    this.inFlight ??= this.load().finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  private async load(): Promise<void> {
    const uri = await this.uri();
    this.fetches++;
    // Counted as a fetch even when it fails: a server that is down is not asked again at once.
    this.fetchedAt = Date.now();
    try {
      const { status, body } = await fetchJson(uri, MAX_JWKS_BYTES);
      const set = body as Partial<JSONWebKeySet> | undefined;
      if (status !== 200 || !Array.isArray(set?.keys))
        throw new AuthServerError(`${uri}: not a JWKS (HTTP ${status})`);
      if (set.keys.length > MAX_KEYS)
        throw new AuthServerError(`${uri}: ${set.keys.length} keys, more than ${MAX_KEYS}`);
      // Only signing keys; an encryption key of the same set must not verify a token.
      const keys = set.keys.filter((k) => k.use === undefined || k.use === 'sig');
      this.keys = createLocalJWKSet({ keys });
      this.failure = undefined;
    } catch (err) {
      this.failure =
        err instanceof AuthServerError
          ? err
          : new AuthServerError(`${uri}: ${(err as Error).message}`, { cause: err });
      throw this.failure;
    }
  }
}
