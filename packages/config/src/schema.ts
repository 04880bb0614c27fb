import { Type, type Static } from '@sinclair/typebox';
import { SandboxConfigSchema } from '@toolgate/sandbox';
import { UpstreamSchema } from './upstreams.js';

/** A string enum that validates with a readable "must be equal to one of the allowed values". */
function StringEnum<const T extends readonly string[]>(values: T, defaultValue: T[number]) {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], default: defaultValue });
}

/** Per-client fair-share defaults (docs/scheduling.md); the worker uses them for unknown clients. */
export const CLIENT_LIMIT_DEFAULTS = {
  queued: 64,
  sandboxInFlight: 4,
  pendingApprovals: 16,
  sessions: 4,
} as const;

/** `host:port` of a Redis node (IPv6 in brackets: `[::1]:6379`). */
const HostPort = Type.String({ pattern: '^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$' });

/**
 * A credential rule (docs/credentials.md): requests to `host` — over `scheme` to `port`, https
 * and 443 unless said otherwise, or an origin `https://host:port` in `host` — get
 * `header: value`, where `${secret:NAME}` in the value is a secret from the store, filled in by
 * the worker at use.
 */
const CredentialRuleSchema = Type.Object(
  {
    host: Type.String({ minLength: 1, maxLength: 300 }),
    // No schema default: a bare host is https, and the port defaults to the scheme's (443, 80);
    // an origin in `host` states both (CredentialRules).
    scheme: Type.Optional(
      Type.Unsafe<'http' | 'https'>({ type: 'string', enum: ['http', 'https'] }),
    ),
    port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    header: Type.String({ pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$" }),
    value: Type.String({ minLength: 1, maxLength: 4096 }),
  },
  { additionalProperties: false },
);

/** One metric's limits per UTC window (docs/budgets.md); at least one window. */
const BudgetWindows = Type.Object(
  {
    day: Type.Optional(Type.Integer({ minimum: 0 })),
    month: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: false, minProperties: 1 },
);

/**
 * `limits.budget` / `limits.perUser.budget`: what a client (or one user of it) may spend per
 * UTC day and/or month (docs/budgets.md). Each metric optional; none: no budget, no cost.
 */
export const BudgetSchema = Type.Object(
  {
    calls: Type.Optional(BudgetWindows),
    sandboxSeconds: Type.Optional(BudgetWindows),
    upstreamCalls: Type.Optional(BudgetWindows),
    egressBytes: Type.Optional(BudgetWindows),
  },
  { additionalProperties: false },
);

const ClientSchema = Type.Object(
  {
    id: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' }),
    /**
     * Plain key (usually `${ENV_VAR}`); hashed at load, never kept in memory as given. Neither
     * key nor keySha256: the client signs in with OAuth tokens only (auth.oauth).
     */
    key: Type.Optional(Type.String({ minLength: 16 })),
    keySha256: Type.Optional(Type.String({ pattern: '^[0-9a-fA-F]{64}$' })),
    tools: Type.Array(Type.String({ minLength: 1 }), { default: ['*'] }),
    /**
     * The `redis.shards` entry this client's data lives on (docs/sharding.md); default: a
     * stable hash of its id over the shards, so clients spread and adding a shard moves few.
     */
    shard: Type.Optional(Type.String({ minLength: 1 })),
    rateLimit: Type.Object(
      { perMinute: Type.Integer({ minimum: 1, default: 600 }) },
      { additionalProperties: false, default: {} },
    ),
    /**
     * What this client may take of the shared backend: calls in flight (queued + running, both
     * queues) and sandbox calls running at once (docs/scheduling.md), and its workspace size.
     */
    limits: Type.Object(
      {
        queued: Type.Integer({ minimum: 1, default: CLIENT_LIMIT_DEFAULTS.queued }),
        sandboxInFlight: Type.Integer({
          minimum: 1,
          default: CLIENT_LIMIT_DEFAULTS.sandboxInFlight,
        }),
        /**
         * Calls this client may have parked for approval at once (they are in flight too, but
         * wait on a person, not a worker): beyond it, 429 `too_many_pending_approvals`.
         */
        pendingApprovals: Type.Integer({
          minimum: 1,
          default: CLIENT_LIMIT_DEFAULTS.pendingApprovals,
        }),
        /** This client's workspace size, MiB; overrides sandbox.limits.workspaceMb. */
        workspaceMb: Type.Optional(Type.Integer({ minimum: 8 })),
        /**
         * What one user of this client (an OAuth token's user claim) may take of the client's
         * share; each absent: only the client's limit applies (docs/auth.md, users).
         */
        perUser: Type.Optional(
          Type.Object(
            {
              rateLimit: Type.Optional(
                Type.Object(
                  { perMinute: Type.Integer({ minimum: 1 }) },
                  { additionalProperties: false },
                ),
              ),
              queued: Type.Optional(Type.Integer({ minimum: 1 })),
              sandboxInFlight: Type.Optional(Type.Integer({ minimum: 1 })),
              /** One user's sessions (docs/sessions.md), inside the client's `sessions`. */
              sessions: Type.Optional(Type.Integer({ minimum: 1 })),
              /** One user's held connections (event streams …), inside `maxStreamsPerClient`. */
              streams: Type.Optional(Type.Integer({ minimum: 1 })),
              /** One user's spend budget, inside the client's (docs/budgets.md). */
              budget: Type.Optional(BudgetSchema),
            },
            { additionalProperties: false },
          ),
        ),
        /** What this client may spend per UTC day / month (docs/budgets.md). */
        budget: Type.Optional(BudgetSchema),
        /** Sessions this client may hold at once (docs/sessions.md): beyond, 429 `too_many_sessions`. */
        sessions: Type.Integer({ minimum: 0, default: CLIENT_LIMIT_DEFAULTS.sessions }),
      },
      { additionalProperties: false, default: {} },
    ),
    /**
     * Whose workspace and memory a call uses: the client's (shared by all its users), or,
     * with `user`, each user's own (calls without a user, e.g. by API key, use the client's).
     */
    isolation: StringEnum(['client', 'user'] as const, 'client'),
    admin: Type.Boolean({ default: false }),
    /** This client's credential rules; a rule for the same host and header overrides the shared one. */
    credentials: Type.Optional(Type.Array(CredentialRuleSchema, { maxItems: 256 })),
  },
  { additionalProperties: false },
);

/**
 * Asymmetric JWS algorithms an access token may be signed with. `none` and the HMAC family
 * (HS*) are never accepted: with HS* a token "signed" with the issuer's public key would pass.
 */
export const OAUTH_ALGORITHMS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
  'Ed25519',
] as const;

/**
 * `auth:` — how requests prove their client: API keys (`clients[].key`) and/or OAuth 2.1
 * bearer tokens from one authorization server (docs/auth.md).
 */
const AuthSchema = Type.Object(
  {
    /** `Authorization: Bearer <client key>` keeps working beside tokens; false: tokens only. */
    apiKeys: Type.Boolean({ default: true }),
    oauth: Type.Optional(
      Type.Object(
        {
          /** The authorization server's issuer URL (exactly as in its metadata and tokens' `iss`). */
          issuer: Type.String({ pattern: '^https?://[^\\s#?]+$' }),
          /**
           * What a token's `aud` must hold: toolgate's canonical resource URL (RFC 8707), or the
           * identifier the server puts there (Entra ID v2: the API's application id).
           */
          audience: Type.String({ minLength: 1 }),
          /**
           * The URL clients know toolgate by (RFC 9728 `resource`, where the metadata and
           * challenges point); default: `audience`, which must then be a URL.
           */
          resource: Type.Optional(Type.String({ pattern: '^https?://[^\\s#?]+$' })),
          /** Overrides the metadata's `jwks_uri`. */
          jwksUri: Type.Optional(Type.String({ pattern: '^https?://' })),
          /** The claim naming the client (a `clients[].id`); absent: `client_id`, then `azp`. */
          clientClaim: Type.Optional(Type.String({ minLength: 1 })),
          /** The claim naming the user acting through the client (a non-empty string). */
          userClaim: Type.String({ minLength: 1, default: 'sub' }),
          /**
           * Clients whose tokens may name no user (client credentials with a `userClaim` the
           * server leaves out): such a token acts as the client itself, as its API key does.
           * Any other token without a user is refused (docs/auth.md, users).
           */
          tokensWithoutUser: Type.Array(Type.String({ minLength: 1 }), {
            uniqueItems: true,
            default: [],
          }),
          /**
           * The scope a token needs, besides an `admin: true` client, to act as an admin; a
           * token of an admin client without it is an ordinary client's (docs/auth.md).
           */
          adminScope: Type.String({ pattern: '^[!#-\\[\\]-~]+$', default: 'toolgate:admin' }),
          /** OAuth scope → tool patterns (as `clients[].tools`) a token with that scope may call. */
          scopes: Type.Record(
            Type.String({ pattern: '^[!#-\\[\\]-~]+$' }), // an RFC 6749 scope-token
            Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }),
            { default: {} },
          ),
          /** Signature algorithms accepted (asymmetric only). */
          algorithms: Type.Array(
            Type.Unsafe<(typeof OAUTH_ALGORITHMS)[number]>({
              type: 'string',
              enum: [...OAUTH_ALGORITHMS],
            }),
            { minItems: 1, uniqueItems: true, default: [...OAUTH_ALGORITHMS] },
          ),
          /** Clock skew allowed on `exp`/`nbf`/`iat`, seconds. */
          clockSkewSeconds: Type.Integer({ minimum: 0, maximum: 300, default: 30 }),
          /**
           * Opaque (non-JWT) tokens are checked at the server's RFC 7662 introspection endpoint
           * with these client credentials; absent: only JWT access tokens are accepted.
           */
          introspection: Type.Optional(
            Type.Object(
              {
                clientId: Type.String({ minLength: 1 }),
                clientSecret: Type.String({ minLength: 1 }),
                /** Overrides the metadata's `introspection_endpoint`. */
                endpoint: Type.Optional(Type.String({ pattern: '^https?://' })),
                /** An answer is reused at most this long (and never past the token's `exp`). */
                cacheSeconds: Type.Integer({ minimum: 0, maximum: 3600, default: 60 }),
              },
              { additionalProperties: false },
            ),
          ),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false, default: {} },
);

const closed = { additionalProperties: false, default: {} } as const;
/** For optional sections: present only when given (a default would switch them on). */
const closedOptional = { additionalProperties: false } as const;

/**
 * Where one Redis deployment is: one of `url` (a single server; the default), `sentinel` or
 * `cluster` (docs/redis-ha.md), its TLS and its durability. The `redis` section, and each of
 * its shards.
 */
const RedisTargetFields = {
  /** `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS. */
  url: Type.Optional(Type.String({ pattern: '^rediss?://' })),
  sentinel: Type.Optional(
    Type.Object(
      {
        /** The master's name the sentinels monitor (`sentinel monitor <name> …`). */
        name: Type.String({ minLength: 1 }),
        nodes: Type.Array(HostPort, { minItems: 1 }),
        /** Password of the master and replicas (`requirepass`). */
        password: Type.Optional(Type.String()),
        username: Type.Optional(Type.String()),
        /** Password of the sentinels themselves, when they have one. */
        sentinelPassword: Type.Optional(Type.String()),
      },
      closedOptional,
    ),
  ),
  cluster: Type.Optional(
    Type.Object(
      {
        /** Some of the cluster's nodes; the rest are found from them. */
        nodes: Type.Array(HostPort, { minItems: 1 }),
        password: Type.Optional(Type.String()),
        username: Type.Optional(Type.String()),
      },
      closedOptional,
    ),
  ),
  /**
   * TLS for sentinel and cluster connections (a `rediss://` url turns it on by itself):
   * `caFile` is a PEM bundle to trust besides the system's.
   */
  tls: Type.Optional(
    Type.Object(
      {
        caFile: Type.Optional(Type.String({ minLength: 1 })),
        servername: Type.Optional(Type.String({ minLength: 1 })),
        rejectUnauthorized: Type.Boolean({ default: true }),
      },
      closedOptional,
    ),
  ),
  /**
   * Replicas that must hold an accepted call before the gateway answers, and, for a tool
   * that is not idempotent, a worker's start of the call before it runs it and the
   * outcome before its reply (Redis `WAIT`, up to `timeoutMs`; past it the call goes on,
   * counted in toolgate_redis_unreplicated_total). 0 = don't wait (one server).
   * docs/redis-ha.md says what each setting guarantees.
   */
  durability: Type.Object(
    {
      replicas: Type.Integer({ minimum: 0, maximum: 16, default: 0 }),
      timeoutMs: Type.Integer({ minimum: 1, maximum: 60_000, default: 1000 }),
    },
    closed,
  ),
};

/** One of `redis.shards`: a Redis deployment some clients' data lives on (docs/sharding.md). */
const ShardSchema = Type.Object(
  {
    /** Named in `clients[].shard`, metrics, logs and errors. */
    id: Type.String({ pattern: '^[a-z0-9][a-z0-9_-]{0,31}$' }),
    /** The shard of deployment-wide data (upstream catalogs, the console's series…); one only. */
    home: Type.Optional(Type.Boolean()),
    ...RedisTargetFields,
    /** This shard's key prefix (default `redis.prefix`); on a Cluster, its hash tag. */
    prefix: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]+$' })),
  },
  closedOptional,
);

export const ConfigSchema = Type.Object(
  {
    server: Type.Object(
      {
        port: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
        host: Type.String({ default: '0.0.0.0' }),
        /**
         * Port of the gateway's /metrics (0 = off), on `host` like the API: never on the public
         * port, since the series name clients, tools and error codes.
         */
        metricsPort: Type.Integer({ minimum: 0, maximum: 65535, default: 9092 }),
        bodyLimitBytes: Type.Integer({ minimum: 1024, default: 1_048_576 }),
        /** Extra time a synchronous request waits beyond the tool's timeout before answering 202. */
        syncWaitGraceMs: Type.Integer({ minimum: 0, default: 5000 }),
        /** How often a gateway expires pending approvals and counts expired cache entries. */
        sweepIntervalMs: Type.Integer({ minimum: 100, default: 5000 }),
        /**
         * Express `trust proxy`: false = the source address is the socket's peer (behind a proxy,
         * the proxy's); a hop count or the proxies' addresses/subnets to read X-Forwarded-For.
         */
        trustProxy: Type.Union(
          [Type.Boolean(), Type.Integer({ minimum: 0 }), Type.Array(Type.String({ minLength: 1 }))],
          { default: false },
        ),
        /**
         * Browser origins allowed to call POST /mcp (DNS-rebinding and cross-site protection,
         * docs/mcp.md): `scheme://host[:port]`, port `*` for any. Requests without an Origin
         * header (non-browser clients) always pass. Empty: in development mode only localhost
         * origins, otherwise none.
         */
        allowedOrigins: Type.Array(
          Type.String({ pattern: '^https?://[^/?#\\s]+$', description: 'scheme://host[:port]' }),
          { default: [] },
        ),
        /**
         * BullMQ's dashboard (Bull Board) at /admin/queues, for admin clients (docs/console.md).
         * `actions`: retry, clean, pause, promote and remove jobs from it; off, it only shows.
         */
        queueDashboard: Type.Object(
          {
            enabled: Type.Boolean({ default: true }),
            actions: Type.Boolean({ default: false }),
          },
          closed,
        ),
      },
      closed,
    ),
    /**
     * Where Redis is: one of `url` (a single server; the default), `sentinel` or `cluster`
     * (docs/redis-ha.md). Every connection of every service uses it.
     */
    redis: Type.Object(
      {
        ...RedisTargetFields,
        /** Key prefix for every toolgate key and queue; lets deployments share a Redis. */
        prefix: Type.String({ pattern: '^[A-Za-z0-9_-]+$', default: 'toolgate' }),
        /**
         * Several Redis deployments, each a url, a Sentinel group or a Cluster as above (or, on
         * one Cluster, a prefix of its own: a hash tag on the master its slot is on): each
         * client's data lives on one of them (`clients[].shard`, default a stable hash of its
         * id), deployment-wide data on the `home` one (docs/sharding.md). Without it, the
         * Redis above is the one home shard. Set it instead of url, sentinel and cluster.
         */
        shards: Type.Optional(Type.Array(ShardSchema, { minItems: 1, maxItems: 64 })),
      },
      closed,
    ),
    clients: Type.Array(ClientSchema, { default: [] }),
    /** Credential rules for every client (docs/credentials.md). */
    credentials: Type.Array(CredentialRuleSchema, { default: [], maxItems: 256 }),
    /**
     * The secret store's keys (docs/credentials.md): 32 bytes, base64 or hex. `key` is filled
     * from TOOLGATE_SECRETS_KEY; else `keyFile` is read. Without either the store is off.
     */
    secrets: Type.Object(
      {
        keyFile: Type.Optional(Type.String({ minLength: 1 })),
        key: Type.Optional(Type.String()),
        previousKeyFiles: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
      },
      closed,
    ),
    auth: AuthSchema,
    /** MCP servers whose tools toolgate serves (docs/upstreams.md). */
    upstreams: Type.Array(UpstreamSchema, { default: [] }),
    policy: Type.Object(
      {
        loopGuard: Type.Object(
          {
            maxCalls: Type.Integer({ minimum: 1, default: 25 }),
            windowSeconds: Type.Integer({ minimum: 1, default: 300 }),
          },
          closed,
        ),
        /** Requests with a missing or unknown key, per source address, before 429. */
        authFailures: Type.Object({ perMinute: Type.Integer({ minimum: 1, default: 60 }) }, closed),
        approval: Type.Object(
          {
            tools: Type.Array(Type.String(), { default: [] }),
            ttlSeconds: Type.Integer({ minimum: 1, default: 900 }),
          },
          closed,
        ),
        http: Type.Object(
          {
            allowPrivateNetworks: Type.Boolean({ default: false }),
            allowHosts: Type.Array(Type.String(), { default: [] }),
            maxResponseBytes: Type.Integer({ minimum: 1, default: 1_048_576 }),
            timeoutMs: Type.Integer({ minimum: 1, default: 10_000 }),
            maxRedirects: Type.Integer({ minimum: 0, default: 5 }),
          },
          closed,
        ),
        shell: Type.Object(
          {
            mode: StringEnum(['blocklist', 'allowlist'], 'blocklist'),
            allow: Type.Array(Type.String(), { default: [] }),
          },
          closed,
        ),
        /**
         * Cedar policies deciding every call on top of the lists (docs/policy.md). Paths are
         * relative to the configuration file; the files are watched and reloaded.
         */
        cedar: Type.Optional(
          Type.Object(
            {
              /** A `.cedar` file, or a folder whose `*.cedar` files make one set. */
              policies: Type.String({ minLength: 1 }),
              /** The `.cedarschema` the set is validated against (strict mode). */
              schema: Type.String({ minLength: 1 }),
              /** The token claim listing the user's groups (`Toolgate::Group`). */
              groupsClaim: Type.String({ minLength: 1, default: 'groups' }),
              /**
               * `always`: destructive tools need approval whatever the policies say (as without
               * Cedar); `policies`: the policies ask for it (`@approval("required")`).
               */
              destructiveApproval: StringEnum(['always', 'policies'], 'always'),
            },
            closedOptional,
          ),
        ),
      },
      closed,
    ),
    calls: Type.Object(
      {
        /** How long a call's state and result stay readable at GET /v1/calls/{id}. */
        ttlSeconds: Type.Integer({ minimum: 60, default: 86_400 }),
        /**
         * Largest result (with its error) stored per call, in bytes of JSON: the call record
         * keeps a cut copy flagged `resultTruncated`, and larger results are not cached. The
         * synchronous answer still carries the whole result.
         */
        maxResultBytes: Type.Integer({ minimum: 1024, default: 262_144 }),
        /**
         * Live events of running calls (`GET /v1/calls/{id}/events`, MCP progress): how much of
         * a call's output is forwarded, how often it is flushed, and how many connections a
         * client may hold open on all gateways together (event streams, the approvals feed, MCP
         * requests that wait; docs/live-output.md), each a slot leased for
         * `streamLeaseSeconds` and renewed by its gateway while open.
         */
        events: Type.Object(
          {
            maxOutputBytes: Type.Integer({ minimum: 0, default: 65_536 }),
            flushMs: Type.Integer({ minimum: 10, maximum: 5000, default: 100 }),
            maxStreamsPerClient: Type.Integer({ minimum: 1, default: 16 }),
            streamLeaseSeconds: Type.Integer({ minimum: 1, maximum: 3600, default: 30 }),
          },
          closed,
        ),
        /**
         * A dialect-bridge request (`POST /v1/tool-calls`) whose HTTP client disconnects
         * cancels its calls that have not finished.
         */
        cancelOnDisconnect: Type.Boolean({ default: true }),
      },
      closed,
    ),
    audit: Type.Object(
      {
        /** Audit entries kept per client (each client has its own stream; oldest dropped first). */
        maxEntriesPerClient: Type.Integer({ minimum: 100, default: 5000 }),
        /** Hard cap on one stored entry (JSON, keys and values); bigger ones are cut, `truncated: true`. */
        maxEntryBytes: Type.Integer({ minimum: 1024, maximum: 65_536, default: 4096 }),
      },
      closed,
    ),
    worker: Type.Object(
      {
        /** Concurrent in-process tool calls per worker process. */
        concurrency: Type.Integer({ minimum: 1, default: 32 }),
        /** Concurrent sandboxed calls per worker process. */
        sandboxConcurrency: Type.Integer({ minimum: 1, default: 4 }),
        /**
         * Sandbox slots per worker beyond `sandboxConcurrency`, only for a call whose client has
         * no sandbox call running: headroom, so a client arriving while others fill every slot
         * starts at once (docs/scheduling.md). A worker runs up to the sum of the two.
         */
        sandboxReserve: Type.Integer({ minimum: 0, maximum: 16, default: 1 }),
        /**
         * Queues this worker consumes: `fast` (in-process tools) and/or `sandbox` (container
         * tools). Split them to scale each pool on its own; a worker without `sandbox` never
         * starts a sandbox driver.
         */
        queues: Type.Array(StringEnum(['fast', 'sandbox'], 'fast'), {
          minItems: 1,
          uniqueItems: true,
          default: ['fast', 'sandbox'],
        }),
        /**
         * A worker that dies mid-call (kill -9, host lost) has its calls settled within this
         * time: retried where the tool is idempotent, else `worker_lost`. A call's lease in its
         * queue is 1/2 of it (renewed every 1/6) and the sweep runs every 1/4; a worker whose
         * event loop stalls longer than the lease loses its calls to the sweep, so keep it well
         * above any synchronous step.
         */
        lostCallTimeoutMs: Type.Integer({ minimum: 3000, default: 12_000 }),
        /** Port of the worker's /metrics and /healthz (0 = off). */
        metricsPort: Type.Integer({ minimum: 0, maximum: 65535, default: 9091 }),
      },
      closed,
    ),
    /** Stateful sessions: one long-lived sandbox per session (docs/sessions.md). */
    sessions: Type.Object(
      {
        /** A session nobody used for this long ends (its sandbox killed). */
        idleSeconds: Type.Integer({ minimum: 1, maximum: 86_400, default: 600 }),
        /** A session ends this long after it was created, used or not. */
        maxLifetimeSeconds: Type.Integer({ minimum: 1, maximum: 604_800, default: 14_400 }),
        /**
         * A call's interrupt (its timeout, a cancel) that has not stopped it after this long
         * ends the session (`session_lost`).
         */
        interruptGraceMs: Type.Integer({ minimum: 100, maximum: 60_000, default: 5000 }),
        /**
         * The bridge (`POST /v1/tool-calls`): run_python / run_shell calls of a request with
         * `X-Conversation-Id` run in that conversation's session, created by its first call,
         * as if each sent `X-Toolgate-Session: conversation`.
         */
        perConversation: Type.Boolean({ default: false }),
      },
      closed,
    ),
    /** run_code_with_tools and run_python's `tools: true` (docs/code-mode.md). */
    codeMode: Type.Object(
      {
        /** Where workers send a script's nested calls (any gateway replica; compose: the gateway service). */
        gatewayUrl: Type.String({ minLength: 1, default: 'http://127.0.0.1:8080' }),
        /** Nested calls one script may make; the next is refused `code_mode_max_calls`. */
        maxCalls: Type.Integer({ minimum: 1, maximum: 10_000, default: 200 }),
        /** Bytes of results one script may receive in all; past it `code_mode_bytes`. */
        maxResultBytes: Type.Integer({ minimum: 1024, default: 8_388_608 }),
        /** A nested call that needs approval: park the script until decided, or fail at once. */
        approval: StringEnum(['wait', 'fail'], 'wait'),
      },
      closed,
    ),
    /** The operator console at /console (docs/console.md). */
    console: Type.Object(
      {
        /** Where its built files are; empty: the checkout's or image's `console/dist`. */
        dir: Type.String({ default: '' }),
        /** A trace viewer URL with `{traceId}` in it, linked from a call's detail view. */
        traceUrl: Type.String({ default: '' }),
      },
      closed,
    ),
    /** Drivers, images, limits, warm pool, reaper: see packages/sandbox/README.md. */
    sandbox: SandboxConfigSchema,
    plugins: Type.Object({ dirs: Type.Array(Type.String(), { default: ['./plugins'] }) }, closed),
    log: Type.Object(
      {
        level: StringEnum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'),
      },
      closed,
    ),
  },
  { additionalProperties: false },
);

export type Config = Static<typeof ConfigSchema>;
export type ClientConfig = Static<typeof ClientSchema>;
export type AuthConfig = Static<typeof AuthSchema>;
export type OAuthConfig = NonNullable<AuthConfig['oauth']>;
export type RedisConfig = Config['redis'];
