/**
 * Checks an OAuth 2.1 access token presented to toolgate (a resource server): a JWT by its
 * signature (the authorization server's JWKS) and claims, an opaque token by asking the server
 * (RFC 7662 introspection). Either way the token must be for toolgate (`aud` = the configured
 * audience), from the configured issuer, and current. docs/auth.md.
 */
import { createHash } from 'node:crypto';
import type { OAuthConfig } from '@toolgate/config';
import { errors, jwtVerify, type JWTPayload } from 'jose';
import { AuthServerError, fetchJson } from './fetch-json.js';
import { JWKS_MAX_AGE_MS, JwksCache } from './jwks.js';

/** What toolgate takes from a valid token. */
export interface VerifiedToken {
  /** The client (tenant) the token was issued to: its client claim. */
  clientId: string;
  /** The user the client acts for (the user claim), when the token names one. */
  user?: string;
  scopes: string[];
  /** The user's groups (the groups claim), when one is configured and the token has it. */
  groups?: string[];
  /** Epoch seconds, when the token says. */
  expiresAt?: number;
}

/**
 * Why a token is refused, where a client may act on it: `no_user`, the token names no usable
 * user (its user claim is absent, empty or not a string).
 */
export type TokenRefusalCode = 'no_user';

/** A token that is not valid for toolgate: answered 401 `invalid_token` with this reason. */
export class TokenRefused extends Error {
  readonly code: TokenRefusalCode | undefined;

  constructor(message: string, options: { cause?: unknown; code?: TokenRefusalCode } = {}) {
    super(message, { cause: options.cause });
    this.name = 'TokenRefused';
    this.code = options.code;
  }
}

/** The parts of RFC 8414 / OpenID Connect discovery metadata toolgate reads. */
export interface AuthServerMetadata {
  issuer: string;
  jwks_uri?: string;
  introspection_endpoint?: string;
  scopes_supported?: string[];
}

export const MAX_METADATA_BYTES = 256 * 1024;
export const MAX_INTROSPECTION_BYTES = 64 * 1024;
/** Verified tokens (and introspection answers) kept at once, each; the oldest go first. */
export const MAX_CACHED_TOKENS = 10_000;
/**
 * A JWT's verdict is reused at most this long (and never past its `exp`): as long as the JWKS
 * is trusted without a fetch, so a key the server withdraws stops working within this time.
 */
export const VERIFIED_JWT_TTL_MS = JWKS_MAX_AGE_MS;
/** After a failed discovery, how long the failure is answered before the server is asked again. */
const DISCOVERY_RETRY_MS = 5000;
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

export class TokenVerifier {
  readonly jwks: JwksCache;
  private metadataPromise: Promise<AuthServerMetadata> | undefined;
  private metadataFailedAt = 0;
  private readonly introspected = new TokenCache();
  /**
   * JWTs already verified: a signature check costs more than the rest of a calculator call,
   * and an assistant sends the same token with every request until it expires.
   */
  private readonly verified = new TokenCache();

  private readonly groupsClaim: string | undefined;

  constructor(
    private readonly config: OAuthConfig,
    jwksOptions: { cooldownMs?: number; maxAgeMs?: number; groupsClaim?: string } = {},
  ) {
    this.groupsClaim = jwksOptions.groupsClaim;
    this.jwks = new JwksCache(async () => {
      if (config.jwksUri) return config.jwksUri;
      const uri = (await this.metadata()).jwks_uri;
      if (!uri) throw new AuthServerError(`${config.issuer} publishes no jwks_uri`);
      return uri;
    }, jwksOptions);
  }

  /**
   * The server's metadata: RFC 8414 (`/.well-known/oauth-authorization-server`, the issuer's
   * path after it), then OpenID Connect discovery. Its `issuer` must be the configured one
   * exactly (RFC 8414 §3.3: metadata for another issuer is a mix-up).
   */
  metadata(): Promise<AuthServerMetadata> {
    if (!this.metadataPromise && Date.now() - this.metadataFailedAt >= DISCOVERY_RETRY_MS) {
      this.metadataPromise = this.discover().catch((err: unknown) => {
        this.metadataFailedAt = Date.now();
        this.metadataPromise = undefined;
        this.lastDiscoveryError = err as Error;
        throw err;
      });
    }
    return (
      this.metadataPromise ??
      Promise.reject(this.lastDiscoveryError ?? new AuthServerError('discovery failed'))
    );
  }

  private lastDiscoveryError: Error | undefined;

  private async discover(): Promise<AuthServerMetadata> {
    const issuer = new URL(this.config.issuer);
    const path = issuer.pathname.replace(/\/$/, '');
    const candidates = [
      `${issuer.origin}/.well-known/oauth-authorization-server${path}`,
      `${this.config.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`,
    ];
    const tried: string[] = [];
    for (const url of candidates) {
      const { status, body } = await fetchJson(url, MAX_METADATA_BYTES).catch((err: unknown) => {
        tried.push((err as Error).message);
        return { status: 0, body: undefined };
      });
      if (status !== 200) {
        if (status !== 0) tried.push(`${url}: HTTP ${status}`);
        continue;
      }
      const metadata = body as Partial<AuthServerMetadata> | undefined;
      if (metadata?.issuer !== this.config.issuer) {
        tried.push(`${url}: names issuer ${JSON.stringify(metadata?.issuer)}`);
        continue;
      }
      return metadata as AuthServerMetadata;
    }
    throw new AuthServerError(
      `no metadata for issuer ${this.config.issuer}: ${tried.join('; ')}`.slice(0, 500),
    );
  }

  /**
   * The token's client, user and scopes; TokenRefused when it is not valid for toolgate,
   * AuthServerError when the authorization server could not be asked.
   */
  async verify(token: string): Promise<VerifiedToken> {
    if (JWT_SHAPE.test(token)) return this.verifyJwt(token);
    if (this.config.introspection) return this.introspect(token);
    throw new TokenRefused('not a JWT access token (and no introspection is configured)');
  }

  private async verifyJwt(token: string): Promise<VerifiedToken> {
    const digest = digestOf(token);
    const now = Date.now();
    const hit = this.verified.get(digest, now);
    if (hit) return hit;
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, this.jwks.getKey, {
        issuer: this.config.issuer,
        audience: this.config.audience,
        algorithms: this.config.algorithms,
        clockTolerance: this.config.clockSkewSeconds,
        requiredClaims: ['exp'],
      }));
    } catch (err) {
      throw refusal(err);
    }
    // jose checks `iat` only against a maximum age: one from the future is refused here.
    if (typeof payload.iat === 'number' && payload.iat - this.config.clockSkewSeconds > now / 1000)
      throw new TokenRefused('the token was issued in the future (iat)');
    const verified = this.grantOf(payload);
    // jose accepted it until exp + the skew; nbf (if any) has passed and stays passed.
    const expiresMs = (verified.expiresAt! + this.config.clockSkewSeconds) * 1000;
    this.verified.set(digest, verified, Math.min(expiresMs, now + VERIFIED_JWT_TTL_MS), now);
    return verified;
  }

  private grantOf(claims: Record<string, unknown>): VerifiedToken {
    const clientClaims = this.config.clientClaim ? [this.config.clientClaim] : ['client_id', 'azp'];
    // The first claim present decides (RFC 9068 §2.2: client_id); a malformed one is never
    // passed over for the next.
    const named = clientClaims.find((c) => claims[c] !== undefined);
    if (named === undefined)
      throw new TokenRefused(`the token has no client claim (${clientClaims.join(' or ')})`);
    const clientId = claims[named];
    if (typeof clientId !== 'string' || clientId === '')
      throw new TokenRefused(`the token's client claim (${named}) is not a non-empty string`);
    const user = claims[this.config.userClaim];
    // A user claim that is there but unusable is refused whatever the client; one that is
    // absent is for OAuthResource to decide (auth.oauth.tokensWithoutUser).
    if (user !== undefined && (typeof user !== 'string' || user === ''))
      throw new TokenRefused(
        `the token's user claim (${this.config.userClaim}) is not a non-empty string`,
        { code: 'no_user' },
      );
    const groups = this.groupsClaim === undefined ? undefined : groupsOf(claims, this.groupsClaim);
    return {
      clientId,
      ...(typeof user === 'string' ? { user } : {}),
      scopes: scopesOf(claims),
      ...(groups === undefined ? {} : { groups }),
      ...(typeof claims.exp === 'number' ? { expiresAt: claims.exp } : {}),
    };
  }

  /** RFC 7662: asks the server; a positive answer is reused until the token expires (bounded). */
  private async introspect(token: string): Promise<VerifiedToken> {
    const intro = this.config.introspection!;
    const digest = digestOf(token);
    const now = Date.now();
    const cached = this.introspected.get(digest, now);
    if (cached) return cached;
    const endpoint = intro.endpoint ?? (await this.metadata()).introspection_endpoint;
    if (!endpoint)
      throw new AuthServerError(`${this.config.issuer} publishes no introspection_endpoint`);
    const basic = Buffer.from(
      `${encodeURIComponent(intro.clientId)}:${encodeURIComponent(intro.clientSecret)}`,
    ).toString('base64');
    const { status, body } = await fetchJson(endpoint, MAX_INTROSPECTION_BYTES, {
      method: 'POST',
      headers: {
        authorization: `Basic ${basic}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ token, token_type_hint: 'access_token' }).toString(),
    });
    if (status !== 200 || typeof body !== 'object' || body === null)
      throw new AuthServerError(`introspection answered HTTP ${status}`);
    const claims = body as Record<string, unknown>;
    if (claims.active !== true) throw new TokenRefused('the token is not active');
    if (claims.token_type === 'refresh_token')
      throw new TokenRefused('a refresh token is not an access token');
    if (claims.iss !== undefined && claims.iss !== this.config.issuer)
      throw new TokenRefused('the token is from another issuer');
    const aud = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    if (!aud.includes(this.config.audience))
      throw new TokenRefused(
        `the token is not for this resource (aud must be ${this.config.audience})`,
      );
    const skew = this.config.clockSkewSeconds;
    const nowSeconds = now / 1000;
    if (typeof claims.exp === 'number' && claims.exp + skew <= nowSeconds)
      throw new TokenRefused('the token has expired');
    if (typeof claims.nbf === 'number' && claims.nbf - skew > nowSeconds)
      throw new TokenRefused('the token is not valid yet');
    if (typeof claims.iat === 'number' && claims.iat - skew > nowSeconds)
      throw new TokenRefused('the token was issued in the future (iat)');
    const verified = this.grantOf(claims);
    const until = Math.min(
      now + intro.cacheSeconds * 1000,
      verified.expiresAt === undefined ? Infinity : verified.expiresAt * 1000,
    );
    this.introspected.set(digest, verified, until, now);
    return verified;
  }
}

/** Tokens by digest until a time, at most MAX_CACHED_TOKENS (the oldest entry goes first). */
class TokenCache {
  private readonly entries = new Map<string, { token: VerifiedToken; until: number }>();

  get(digest: string, now: number): VerifiedToken | undefined {
    const entry = this.entries.get(digest);
    if (!entry) return undefined;
    if (entry.until > now) return entry.token;
    this.entries.delete(digest);
    return undefined;
  }

  set(digest: string, token: VerifiedToken, until: number, now: number): void {
    if (until <= now) return;
    if (this.entries.size >= MAX_CACHED_TOKENS) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(digest, { token, until });
  }
}

/** Groups past these bounds refuse the token: a cut list could drop a group a forbid names. */
export const MAX_GROUPS = 256;
const MAX_GROUP_LENGTH = 256;

/** The groups claim: a list of names (or one name); absent: none. */
function groupsOf(claims: Record<string, unknown>, claim: string): string[] | undefined {
  const value = claims[claim];
  if (value === undefined) return undefined;
  const list = typeof value === 'string' ? [value] : value;
  if (
    !Array.isArray(list) ||
    list.length > MAX_GROUPS ||
    !list.every((g) => typeof g === 'string' && g.length > 0 && g.length <= MAX_GROUP_LENGTH)
  )
    throw new TokenRefused(
      `the token's groups claim (${claim}) is not a list of at most ${MAX_GROUPS} names of 1 to ${MAX_GROUP_LENGTH} characters`,
    );
  return list as string[];
}

/** Tokens are kept by digest: the cache never holds a usable credential. */
function digestOf(token: string): string {
  return createHash('sha256').update(token).digest('base64url');
}

/** `scope` (RFC 9068, space-separated) or `scp` (Entra ID, Okta: a string or an array). */
function scopesOf(claims: Record<string, unknown>): string[] {
  const raw = claims.scope ?? claims.scp;
  if (typeof raw === 'string') return raw.split(' ').filter((s) => s !== '');
  if (Array.isArray(raw)) return raw.filter((s): s is string => typeof s === 'string');
  return [];
}

/** jose's verdict as the reason a client reads (no key material, no token text). */
function refusal(err: unknown): Error {
  if (err instanceof AuthServerError) return err;
  if (err instanceof errors.JWTExpired) return new TokenRefused('the token has expired');
  if (err instanceof errors.JWTClaimValidationFailed) {
    const reason =
      {
        iss: 'the token is from another issuer',
        aud: 'the token is not for this resource (wrong audience)',
        nbf: 'the token is not valid yet',
        iat: 'the token is not valid yet',
        exp: 'the token has no expiry',
      }[err.claim] ?? `the token's ${err.claim} claim is not valid`;
    return new TokenRefused(reason);
  }
  if (err instanceof errors.JOSEAlgNotAllowed || err instanceof errors.JOSENotSupported)
    return new TokenRefused('the token is signed with an algorithm this server does not accept');
  if (err instanceof errors.JWKSNoMatchingKey || err instanceof errors.JWKSMultipleMatchingKeys)
    return new TokenRefused("the token's signing key is not among the issuer's keys");
  if (err instanceof errors.JWSSignatureVerificationFailed)
    return new TokenRefused("the token's signature does not verify");
  return new TokenRefused('the token is malformed', { cause: err });
}
