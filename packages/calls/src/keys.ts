import type { QueueKind } from './types.js';

/**
 * A BullMQ queue's name: a queue kind, or one worker's own queue for the calls of the sessions
 * it hosts (`sessions-<worker id>`, docs/sessions.md). BullMQ names hold no `:`.
 */
export type QueueName = QueueKind | `sessions-${string}`;

/** A call id as the gateway makes them (a v4 UUID, lower case). */
const CALL_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/**
 * True for strings that can be call ids. Ids from URLs are checked before they touch Redis:
 * `queue`, `active` or `delayed` would otherwise name the queues' own keys (WRONGTYPE).
 */
export function isCallId(id: string): boolean {
  return CALL_ID.test(id);
}

/**
 * Whose data a call uses (its idempotency keys, and under `isolation: user` its workspace and
 * memory): the client, or one user of it as `<client>@<user, base64url>`. Client ids cannot
 * hold `@` and base64url holds no `:` or braces, so no user's name reads as another client's
 * or another user's, whatever characters the token's user claim has.
 */
export function principal(clientId: string, user?: string): string {
  return user === undefined ? clientId : `${clientId}@${Buffer.from(user).toString('base64url')}`;
}

/**
 * Every Redis key, channel and queue name toolgate uses, under one configurable prefix. No
 * other module builds a key name: each takes its key or prefix from here, so the families
 * listed in docs/redis-keys.md (owner, size bound, lifetime) are all the families there are.
 */
export class Keys {
  /**
   * The root of every family used together with others (in one MULTI, pipeline or script),
   * the queues among them: the prefix itself on one server or Sentinel; on a Redis Cluster
   * the prefix as a hash tag, `{toolgate}`, so those keys share one slot (the queues' scripts
   * and toolgate's transactions span queue, records and stats). The single-key counters a
   * call passes through (rate limits, loop guard, bad keys, MCP levels and request ids, code
   * mode capabilities) are on it too: spread over a cluster's masters, a master's death failed
   * calls of every prefix (every shard) with a counter on it, not only of those it serves.
   */
  readonly prefix: string;

  /**
   * @param base `redis.prefix`
   * @param options.cluster the keys are for a Redis Cluster: hash-tag the root (above).
   */
  constructor(
    readonly base: string,
    options: { cluster?: boolean } = {},
  ) {
    this.prefix = options.cluster ? `{${base}}` : base;
  }

  /** The keys for a `redis` config section (hash-tagged when it names a cluster). */
  static for(redis: { prefix: string; cluster?: unknown }): Keys {
    return new Keys(redis.prefix, { cluster: redis.cluster !== undefined });
  }

  /**
   * The prefix of the BullMQ queues (`<prefix>:<queue>:wait`, `:prioritized`, `:active`, a job
   * hash `<prefix>:<queue>:<call id>`…): the root itself, so on a Redis Cluster every queue key
   * carries the same hash tag as toolgate's own keys and the admission and release scripts may
   * name both (docs/redis-keys.md).
   */
  get queuePrefix(): string {
    return this.prefix;
  }

  /**
   * A call that ended: a short-lived stub (tool, client, accept time; why it failed, if it
   * failed outside its tool) read by lookups before the worker's batched record lands.
   */
  ended(id: string): string {
    return `${this.prefix}:ended:${id}`;
  }

  /**
   * A call a cancel or a lost host's reaper took out of its queue (short-lived): BullMQ's remove
   * answers 1 for a job already gone, so this decides which of two removers ends the call.
   */
  removed(id: string): string {
    return `${this.prefix}:removed:${id}`;
  }

  /** The queue of a session's call (a worker's own queue), for finding it by id. */
  queueOf(id: string): string {
    return `${this.prefix}:queue-of:${id}`;
  }

  /** What every in-flight set's name starts with (the client id and queue follow). */
  get inFlightPrefix(): string {
    return `${this.prefix}:inflight:`;
  }

  /** Sorted set of a client's calls accepted and not yet finished in one queue, scored by accept time. */
  inFlight(clientId: string, kind: QueueKind): string {
    return `${this.inFlightPrefix}${clientId}:${kind}`;
  }

  /**
   * Sorted set of one user's calls in flight in one queue (`limits.perUser.queued`), scored by
   * accept time; the user comes last, raw, so the queue's scripts can name it from a job.
   */
  userInFlight(clientId: string, kind: QueueKind, user: string): string {
    return `${this.userInFlightPrefix}${clientId}:${kind}:${user}`;
  }

  /** What every user's in-flight set's name starts with (client, queue and user follow). */
  get userInFlightPrefix(): string {
    return `${this.prefix}:inflight-user:`;
  }

  /**
   * Sorted set of the users of a client with calls in flight in one queue, scored by their
   * last accept time: how many share the client's turns (fair order between users). Bounded by
   * the client's `limits.queued`.
   */
  usersInFlight(clientId: string, kind: QueueKind): string {
    return `${this.prefix}:inflight-users:${clientId}:${kind}`;
  }

  /** Sorted set of one user's sandbox calls running now (`limits.perUser.sandboxInFlight`). */
  userRunning(clientId: string, user: string): string {
    return `${this.prefix}:running-user:${clientId}:sandbox:${user}`;
  }

  /**
   * A client's spend in one budget window (a hash: calls, sandboxMs, upstreamCalls, egressBytes;
   * `period` is `d20261205` or `m202612`), expiring an hour past the window's end
   * (docs/budgets.md). On the root: the worker's RELEASE script charges it with the call's end.
   */
  budget(clientId: string, period: string): string {
    return `${this.prefix}:budget:${clientId}:${period}`;
  }

  /** One user's spend in one budget window of its client (user base64url: no `:` in it). */
  userBudget(clientId: string, period: string, user: string): string {
    return `${this.prefix}:budget-user:${clientId}:${period}:${Buffer.from(user).toString('base64url')}`;
  }

  /** Sorted set of a client's calls running now in one queue (worker leases), scored by lease expiry. */
  running(clientId: string, kind: QueueKind): string {
    return `${this.prefix}:running:${clientId}:${kind}`;
  }

  call(id: string): string {
    return `${this.prefix}:call:${id}`;
  }

  /**
   * A call's brief (CallBrief): the few fields listings show, written with the record and
   * expiring with it, so a listing reads ≤ BRIEF_MAX_BYTES per call whatever the result's size.
   */
  callBrief(id: string): string {
    return `${this.prefix}:brief:${id}`;
  }

  /**
   * A running script's code-mode capability (a hash: client, parent call, calls remaining, and
   * the caller's user and token scopes when it had them),
   * named by the digest of its token and expiring with the script (docs/code-mode.md).
   */
  codeModeCapability(tokenDigest: string): string {
    return `${this.prefix}:codemode:${tokenDigest}`;
  }

  idempotency(clientId: string, key: string): string {
    return `${this.prefix}:idem:${clientId}:${key}`;
  }

  get workers(): string {
    return `${this.prefix}:workers`;
  }

  /** A gateway's own channel for outcomes of the calls it waits for. */
  reply(gatewayId: string): string {
    return `${this.prefix}:reply:${gatewayId}`;
  }

  /**
   * A call's event backlog (a capped stream, see CallEventWriter): what a reader that joins
   * while the call runs replays before the live events.
   */
  events(id: string): string {
    return `${this.prefix}:events:${id}`;
  }

  /** A call's live events (pub/sub): the same events as its backlog, and its outcome. */
  eventsChannel(id: string): string {
    return `${this.prefix}:ev:${id}`;
  }

  /** A client's recent calls: a sorted set of call ids scored by time, capped (CallIndex). */
  callIndex(clientId: string): string {
    return `${this.prefix}:calls:${clientId}`;
  }

  /** One minute of the console's time series (a hash of counters and gauges; per client too). */
  series(minute: number, clientId?: string): string {
    return clientId === undefined
      ? `${this.prefix}:series:${minute}`
      : `${this.prefix}:series:${minute}:${clientId}`;
  }

  /**
   * One minute of a client's calls per user (a hash: `c:<user>`, `e:<user>`): at most as many
   * users as the client's rate lets call in a minute, kept as long as the minute's other keys.
   */
  userSeries(minute: number, clientId: string): string {
    return `${this.series(minute, clientId)}:users`;
  }

  /** Hash worker id → warm sandboxes it holds now (written with its heartbeat). */
  get warm(): string {
    return `${this.prefix}:warm`;
  }

  /**
   * Sorted set of a client's held connections (event streams, the approvals feed, MCP requests
   * that wait), scored by lease expiry; one member per open connection (ConnectionBudget).
   */
  heldConnections(clientId: string): string {
    return `${this.prefix}:held:${clientId}`;
  }

  /** Channel of approval changes (parked, decided, expired, cancelled) for the console. */
  get approvalEvents(): string {
    return `${this.prefix}:approval-events`;
  }

  /** Channel every worker listens on for cancelled calls (`{id, by}`). */
  get cancels(): string {
    return `${this.prefix}:cancels`;
  }

  /**
   * A timestamp each gateway and worker writes just before a Redis `WAIT` (ReplicaWait): the
   * write that WAIT waits for, standing for every write acknowledged before it.
   */
  get replicated(): string {
    return `${this.prefix}:replicated`;
  }

  /** Marks a call as cancelled, for a worker that missed the message (short-lived). */
  cancelled(id: string): string {
    return `${this.prefix}:cancelled:${id}`;
  }

  /** One audit stream per client, each capped on its own: a flood evicts only its sender's history. */
  audit(clientId: string): string {
    return `${this.prefix}:audit:${clientId}`;
  }

  /** Set of the client ids that have an audit stream (the merged view reads each of them). */
  get auditClients(): string {
    return `${this.prefix}:audit-clients`;
  }

  /** Key prefix of the per-address counter of requests with a missing or unknown key. */
  get authFailures(): string {
    return `${this.prefix}:authfail`;
  }

  /** Sorted set of pending approvals, scored by expiry time. */
  get approvals(): string {
    return `${this.prefix}:approvals`;
  }

  /**
   * Sorted set of one client's pending approvals, scored by expiry time: what
   * `limits.pendingApprovals` counts (the shared set above holds everyone's).
   */
  clientApprovals(clientId: string): string {
    return `${this.prefix}:approvals:${clientId}`;
  }

  cache(tool: string, digest: string): string {
    return `${this.prefix}:cache:${tool}:${digest}`;
  }

  /** Sorted set of live cache keys scored by expiry, for key counts and eviction counts. */
  get cacheIndex(): string {
    return `${this.prefix}:cache-index`;
  }

  /**
   * One owner's secrets (packages/secrets): a client's own, or one user's of that client. `values`
   * is a hash name → sealed value (AES-256-GCM, key id inside); `times` a sorted set name →
   * last update (ms), what listings read. Client ids cannot hold ":", and the user is
   * URI-encoded, so owners never share a key.
   */
  secrets(clientId: string, user?: string): { values: string; times: string } {
    const owner = user === undefined ? clientId : `${clientId}:u:${encodeURIComponent(user)}`;
    return {
      values: `${this.prefix}:secret:${owner}`,
      times: `${this.prefix}:secret-at:${owner}`,
    };
  }

  /** Set of every secret owner (`client` or `client:u:<user>`): what `secrets rotate` walks. */
  get secretOwners(): string {
    return `${this.prefix}:secret-owners`;
  }

  /** Hash client id → id of the last reset of its workspace (see WorkspaceResets). */
  get workspaceResets(): string {
    return `${this.prefix}:workspace-resets`;
  }

  stat(kind: 'tool' | 'durations', tool: string): string {
    return `${this.prefix}:stats:${kind}:${tool}`;
  }

  stats(kind: 'tools' | 'recent' | 'slowest' | 'cache'): string {
    return `${this.prefix}:stats:${kind}`;
  }

  /** One client's own stats (what `/v1/stats` shows that client): the same keys, per client. */
  clientStat(clientId: string, kind: 'tool' | 'durations', tool: string): string {
    return `${this.prefix}:stats:client:${clientId}:${kind}:${tool}`;
  }

  clientStats(clientId: string, kind: 'tools' | 'recent' | 'slowest' | 'cache'): string {
    return `${this.prefix}:stats:client:${clientId}:${kind}`;
  }

  /**
   * A client's stats per user: a hash of `calls:<user>`, `errors:<user>`, `ms:<user>`, and a
   * sorted set of its users by last call, which bounds the hash (USER_STATS_MAX users).
   */
  userStats(clientId: string): { counts: string; seen: string } {
    const counts = `${this.prefix}:stats:client:${clientId}:users`;
    return { counts, seen: `${counts}-seen` };
  }

  /**
   * rate-limiter-flexible's key prefix for clients allowed `perMinute` calls a minute; it
   * appends `:<clientId>`. One limiter per rate, so a changed rate starts a fresh count.
   */
  ratePrefix(perMinute: number): string {
    return `${this.prefix}:rate:${perMinute}`;
  }

  /**
   * rate-limiter-flexible's key prefix for users allowed `perMinute` calls a minute
   * (`limits.perUser.rateLimit`); it appends `:<clientId>:<user>`.
   */
  userRatePrefix(perMinute: number): string {
    return `${this.prefix}:rate-user:${perMinute}`;
  }

  /** rate-limiter-flexible's key prefix for the loop guard; it appends `:<clientId>:<conversationId>`. */
  get loopGuardPrefix(): string {
    return `${this.prefix}:loop`;
  }

  /**
   * The MCP logging level of a principal (`principal()`: a client, or one user of it) set by
   * `logging/setLevel` of a 2025-era client, who has no session.
   */
  mcpLogLevel(principal: string): string {
    return `${this.prefix}:mcp-loglevel:${principal}`;
  }

  /**
   * The protocol version a 2025-era MCP client of this principal (`principal()`) declared at
   * `initialize` together with URL-mode elicitation (its capabilities live nowhere else: no
   * session is kept). Read only when a call of its lacks a secret.
   */
  mcpUrlElicitation(principal: string): string {
    return `${this.prefix}:mcp-elicit-url:${principal}`;
  }

  /** The call an MCP request runs, so `notifications/cancelled` on any gateway can cancel it. */
  mcpRequest(clientId: string, requestId: string): string {
    return `${this.prefix}:mcp-req:${clientId}:${requestId}`;
  }

  /**
   * A client's memory (a hash of entries) and its version counter. The hash tag keeps both in
   * one Redis Cluster slot (the memory scripts touch both), and each client's memory in its
   * own slot: the memory tool's data spreads over a cluster's masters.
   */
  memory(clientId: string): { entries: string; version: string } {
    const entries = `${this.base}:memory:{${clientId}}`;
    return { entries, version: `${entries}:v` };
  }

  /**
   * One upstream MCP server's catalog (a hash: its tool definitions as JSON, their hash, when
   * read, the last error) and the lease of the process refreshing it (docs/upstreams.md): used
   * alone, never with other keys, on the base, not the hash-tagged root. And its pins (each
   * tool's current and approved definition hash) with the definitions they name, kept without
   * a TTL (an approval outlives restarts) and written together, so on the root. A stdio
   * upstream's `supervisors`: each worker's state of its server (a hash by worker), used alone.
   */
  upstream(id: string): {
    catalog: string;
    lease: string;
    pins: string;
    defs: string;
    supervisors: string;
  } {
    const catalog = `${this.base}:upstream:${id}`;
    // Pins and definitions are written together by one script: on the root, one slot.
    const root = `${this.prefix}:upstream-pins:${id}`;
    return {
      catalog,
      lease: `${catalog}:lease`,
      pins: root,
      defs: `${root}:defs`,
      supervisors: `${catalog}:supervisors`,
    };
  }

  /** The name of a worker's own queue for the calls of the sessions it hosts. */
  sessionQueue(workerId: string): QueueName {
    return `sessions-${workerId}`;
  }

  /**
   * A session (hash: owner client, tool, host worker, times; docs/sessions.md), expiring at its
   * idle or lifetime end, whichever comes first.
   */
  session(id: string): string {
    return `${this.prefix}:session:${id}`;
  }

  /** What every session hash's name starts with (scripts add the id). */
  get sessionPrefix(): string {
    return `${this.prefix}:session:`;
  }

  /** Sorted set of a client's sessions scored by expiry: what `limits.sessions` counts. */
  clientSessions(clientId: string): string {
    return `${this.clientSessionsPrefix}${clientId}`;
  }

  get clientSessionsPrefix(): string {
    return `${this.prefix}:sessions:client:`;
  }

  /** Set of the sessions one worker hosts (removed with them when the worker is lost). */
  hostSessions(workerId: string): string {
    return `${this.hostSessionsPrefix}${workerId}`;
  }

  get hostSessionsPrefix(): string {
    return `${this.prefix}:sessions:host:`;
  }

  /**
   * The session of one of a client's bridge conversations, per tool (string: the session id),
   * expiring with the session's lifetime (docs/sessions.md#conversations).
   */
  conversationSession(clientId: string, tool: string, conversationId: string): string {
    return `${this.prefix}:sessions:conversation:${clientId}:${tool}:${conversationId}`;
  }

  /** Sorted set worker id → last beat of each worker that hosts sessions. */
  get sessionHosts(): string {
    return `${this.prefix}:session-hosts`;
  }

  /**
   * On the home shard (docs/sharding.md#moving-a-client): hash client id → the shard a move put
   * it on, which wins over `clients[].shard` and the hash; kept for good (no TTL).
   */
  get shardPlacements(): string {
    return `${this.prefix}:shard-placements`;
  }

  /** On the home shard: hash client id → id of the move running for it (its new calls wait). */
  get shardMoving(): string {
    return `${this.prefix}:shard-moving`;
  }

  /** On the home shard: a client's move lease (the move id), renewed by the gateway running it. */
  shardMoveLease(clientId: string): string {
    return `${this.prefix}:shard-move-lease:${clientId}`;
  }

  /** On the home shard: one move's state and progress (a hash), kept a day after it ends. */
  shardMove(id: string): string {
    return `${this.prefix}:shard-move:${id}`;
  }

  /** On the home shard: channel of placement and move changes (`{client}`); gateways re-read. */
  get shardPlacementEvents(): string {
    return `${this.prefix}:shard-placement-events`;
  }

  /** Channel of deleted sessions (`{id}`): the hosting worker kills the sandbox at once. */
  get sessionKills(): string {
    return `${this.prefix}:session-kills`;
  }
}
