/**
 * The upstreams' tool catalogs, shared through Redis so gateways and workers agree: one
 * process at a time (a lease) reads an upstream's `tools/list` every `refreshSeconds`, and at
 * once on `notifications/tools/list_changed`, and writes it; every process reads it back each
 * second (one HGET per upstream, and one more for its pins' counter under `trust: pin`) and
 * turns a changed catalog, or a changed approval, into registry tools (pins.ts: only
 * approved definitions are served under `pin`).
 */
import { randomUUID } from 'node:crypto';
import {
  AuditLog,
  canonicalDigest,
  createRedis,
  Keys,
  type AuditLimits,
  type RedisClient,
} from '@toolgate/calls';
import type { RedisConfig } from '@toolgate/config';
import { isStdioUpstream, upstreamToolName, type UpstreamConfig } from '@toolgate/config';
import type { ToolRegistry, UnenforcedPattern } from '@toolgate/registry';
import type { GuardedFetch } from '@toolgate/tools';
import { ListingTooLarge, UpstreamConnection } from './connection.js';
import type { StdioServers, StdioSnapshot, StdioState } from './stdio-server.js';
import {
  definitionHash,
  Pins,
  pinStatus,
  type ApproveResult,
  type PinEntry,
  type PinEvent,
  type PinStatus,
} from './pins.js';
import { scanDefinition, type ScanFlag } from './scan.js';
import { definitionOf, upstreamToolSpec, type UpstreamToolDefinition } from './tool.js';

/** Budgets of one upstream's catalog: a hostile server is cut, never trusted to stop. */
export const CATALOG_LIMITS = {
  /** Tools kept per upstream; the rest are reported. */
  maxTools: 500,
  /** One tool's definition (name, description, schemas, annotations), bytes of JSON. */
  maxToolBytes: 64 * 1024,
  /** The whole catalog, bytes of JSON. */
  maxCatalogBytes: 2 * 1024 * 1024,
  /** `tools/list` pages read per refresh. */
  maxPages: 32,
  /**
   * Bytes of `tools/list` answers read per refresh, all pages together (one page is cut at
   * this as it arrives): a hostile list costs one answer's worth, not one per page.
   */
  maxListingBytes: 8 * 1024 * 1024,
  /** Problems kept per upstream (the log has each). */
  maxProblems: 20,
  /**
   * Time one process spends compiling one upstream's schemas per change (synchronous, on the
   * gateway's event loop): tools past it are left out, here only.
   */
  compileBudgetMs: 1000,
} as const;

/** How often every process looks for a new catalog. */
const POLL_MS = 1000;
/**
 * A worker writes its stdio server's state when it changes, and at least this often; a state
 * not written for SUPERVISOR_STALE_MS is a worker gone (not shown, and deleted by the next
 * reader). The hash expires SUPERVISOR_TTL_MS after the last write.
 */
const SUPERVISOR_WRITE_MS = 10_000;
const SUPERVISOR_STALE_MS = 30_000;
const SUPERVISOR_TTL_MS = 60_000;

export type UpstreamState = 'up' | 'down' | 'unknown';

/** What the catalog hash's `meta` field holds. */
interface CatalogMeta {
  /** When the last refresh was tried (ms), whether or not it worked. */
  checkedAt: number;
  /** Digest of the tools field. */
  hash: string;
  tools: number;
  problems: string[];
  /** Tools of the list left out by the budgets (problems holds the first reasons only). */
  leftOut?: number;
  /** The last refresh failed (the tools are the last ones read). */
  error?: string;
  /** The catalog hash whose definitions were recorded in the pins (they are, when equal). */
  pinned?: string;
  /** When the last refresh made early for a `list_changed` was tried (ms). */
  notifiedAt?: number;
}

/** A tool this process does not serve until an admin approves its definition. */
export interface HeldTool {
  upstream: string;
  /** The upstream's own name. */
  tool: string;
  /** Its toolgate name. */
  name: string;
  status: Exclude<PinStatus, 'approved'>;
}

/** One tool in `GET /v1/upstreams` (docs/http-api.md). */
export interface UpstreamToolReport {
  tool: string;
  name: string;
  status: PinStatus;
  /** The hash of the definition served now: what an approval names. */
  hash: string;
  approvedHash?: string;
  approvedBy?: string;
  approvedAt?: string;
  seenAt: string;
  changedAt?: string;
  current: unknown;
  /** The approved definition, when it is not the current one (the diff's other side). */
  approved?: unknown;
  flags: ScanFlag[];
  /**
   * Why the tool is not served whatever its status: another of the upstream's tools becomes the
   * same toolgate name (docs/upstreams.md, "Naming").
   */
  leftOut?: string;
}

export interface UpstreamReport {
  id: string;
  trust: 'pin' | 'auto';
  state: UpstreamState;
  checkedAt?: string;
  /** A stdio upstream's: each worker's supervisor of its server, by worker id. */
  supervisors?: SupervisorReport[];
  tools: UpstreamToolReport[];
  /**
   * Tools of its list not served: over a budget, colliding names, schemas that do not
   * compile. `problems` says why, the first CATALOG_LIMITS.maxProblems of them.
   */
  leftOut: { count: number; problems: string[] };
  /**
   * Patterns of its served tools' schemas toolgate does not check (RE2 cannot run them, or
   * past a tool's budget): the upstream checks them itself (docs/upstreams.md).
   */
  unenforcedPatterns: UnenforcedPatternReport[];
}

/** A pattern of an upstream tool's schema left to the upstream; `path` is in its definition. */
export interface UnenforcedPatternReport extends UnenforcedPattern {
  /** The upstream's own name of the tool. */
  tool: string;
}

/** One worker's stdio server, as `GET /v1/upstreams` shows it. */
export interface SupervisorReport {
  worker: string;
  state: StdioState;
  since: string;
  restarts: number;
  lastError?: string;
  lastErrorAt?: string;
  /** This worker uses its host's shared server, run by worker `owner` (the state is the owner's). */
  shared?: true;
  owner?: string;
  /** This worker runs its host's shared server; the host's other workers connected to it. */
  followers?: number;
  /** When the worker last wrote this (at least every 10 s). */
  seenAt: string;
}

/** A stdio upstream's supervisors in `/readyz`: no worker id, no error text. */
export interface SupervisorSummary {
  state: StdioState;
  restarts: number;
  /** The worker uses its host's shared server (the state is that server's). */
  shared?: true;
}

/** What a worker writes to `Keys.upstream(id).supervisors`, field = its worker id. */
interface SupervisorEntry extends StdioSnapshot {
  /** Epoch ms of this write. */
  at: number;
}

/** Audit entries' defaults when the opener gives no `audit` limits (the config's defaults). */
const AUDIT_DEFAULTS: AuditLimits = { maxEntriesPerClient: 5000, maxEntryBytes: 4096 };

export interface CatalogLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

export interface UpstreamStatus {
  state: UpstreamState;
  tools: number;
  /** Tools left out: over a budget, colliding names, schemas that do not compile. */
  skipped: number;
}

/** The catalog outlives its last refresh by this long (docs/redis-keys.md). */
function catalogTtlSeconds(upstream: UpstreamConfig): number {
  return upstream.refreshSeconds * 10 + 3600;
}

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
/** Deletes a stale supervisor field only if it is still the one read (its worker may be back). */
const DELETE_STALE = `if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0`;

export class UpstreamCatalog {
  private static readonly shared = new WeakMap<ToolRegistry, UpstreamCatalog>();
  private readonly token = randomUUID();
  private readonly listing = new Map<string, UpstreamConnection>();
  /** Per upstream: the catalog hash applied, and the registry names it gave. */
  private readonly applied = new Map<
    string,
    {
      version: string;
      names: string[];
      skipped: number;
      /** Why, for the first CATALOG_LIMITS.maxProblems of them. */
      problems: string[];
      held: Map<string, HeldTool>;
    }
  >();
  /** Per upstream: the last catalog read, with each definition's hash. */
  private readonly reads = new Map<
    string,
    { hash: string; tools: { def: UpstreamToolDefinition; hash: string }[] }
  >();
  private readonly pins: Pins;
  private readonly audit: AuditLog;
  private readonly metas = new Map<string, CatalogMeta>();
  /** Upstreams that sent `list_changed` since their last read. */
  private readonly changed = new Set<string>();
  /** Stdio upstreams whose server (re)started since their last read. */
  private readonly started = new Set<string>();
  /** When this process last renewed an idle stdio server's catalog TTL. */
  private readonly kept = new Map<string, number>();
  /** Per stdio upstream: what this process last wrote of its server, and when. */
  private readonly written = new Map<string, { text: string; at: number }>();
  /** Per stdio upstream: every worker's supervisor, as read each second. */
  private readonly supervisors = new Map<string, Map<string, SupervisorEntry>>();
  private timer: NodeJS.Timeout | undefined;
  private users = 0;
  private ticking: Promise<void> | undefined;
  private firstSync: Promise<void> | undefined;

  private constructor(
    private readonly upstreams: readonly UpstreamConfig[],
    private readonly registry: ToolRegistry,
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly fetchImpl: GuardedFetch,
    private readonly log: CatalogLogger,
    auditLimits: AuditLimits,
    private stdio: StdioServers | undefined,
    /** The name this process's stdio supervisors are written under. */
    private worker: string,
  ) {
    this.pins = new Pins(redis, keys);
    this.audit = new AuditLog(redis, keys, auditLimits);
  }

  /**
   * The catalog of `registry`: a gateway and a worker in one process (the tests) share one
   * registry, so they share its catalog too. Each `open` takes a `close`.
   */
  static open(options: {
    upstreams: readonly UpstreamConfig[];
    registry: ToolRegistry;
    /** The catalog keeps a connection of its own: it outlives whichever opener closes first. */
    redis: RedisConfig;
    fetch: GuardedFetch;
    log: CatalogLogger;
    /** `audit:` of the config, for the entries of first-seen, changed and approved tools. */
    audit?: AuditLimits;
    /**
     * The worker's stdio upstreams: only a process that has them reads their lists (a gateway
     * has no sandbox, and serves what the workers wrote).
     */
    stdio?: StdioServers;
    /** The worker's id, naming its stdio servers' states (a random one when not given). */
    workerId?: string;
  }): UpstreamCatalog {
    let catalog = UpstreamCatalog.shared.get(options.registry);
    if (!catalog) {
      const redis = createRedis(options.redis, 'command');
      redis.on('error', (err: Error) => options.log.debug({ err: err.message }, 'redis error'));
      catalog = new UpstreamCatalog(
        options.upstreams,
        options.registry,
        redis,
        Keys.for(options.redis),
        options.fetch,
        options.log,
        options.audit ?? AUDIT_DEFAULTS,
        options.stdio,
        options.workerId ?? randomUUID(),
      );
      UpstreamCatalog.shared.set(options.registry, catalog);
    } else if (options.stdio && !catalog.stdio) {
      // A gateway opened it first (one process running both, as in the tests).
      catalog.stdio = options.stdio;
      if (options.workerId) catalog.worker = options.workerId;
    }
    catalog.users++;
    catalog.start();
    return catalog;
  }

  /**
   * Resolves once each upstream's catalog was read or refreshed once (or failed to be): at
   * most about `timeoutMs` of the slowest upstream.
   */
  ready(): Promise<void> {
    return this.firstSync ?? Promise.resolve();
  }

  status(): Record<string, UpstreamStatus> {
    const out: Record<string, UpstreamStatus> = {};
    for (const u of this.upstreams) {
      const meta = this.metas.get(u.id);
      const applied = this.applied.get(u.id);
      out[u.id] = {
        state: !meta ? 'unknown' : meta.error !== undefined ? 'down' : 'up',
        tools: applied?.names.length ?? 0,
        skipped: (applied?.skipped ?? 0) + (meta?.leftOut ?? meta?.problems.length ?? 0),
      };
    }
    return out;
  }

  async close(): Promise<void> {
    if (--this.users > 0) return;
    clearInterval(this.timer);
    this.timer = undefined;
    await this.ticking;
    UpstreamCatalog.shared.delete(this.registry);
    // This worker's servers are stopping: its entries go with it.
    for (const id of this.written.keys())
      await this.redis.hdel(this.keys.upstream(id).supervisors, this.worker).catch(() => undefined);
    await Promise.all([...this.listing.values()].map((c) => c.close()));
    await this.fetchImpl.close();
    this.redis.disconnect();
  }

  private start(): void {
    if (this.timer) return;
    this.firstSync = this.tick();
    this.timer = setInterval(() => void this.tick(), POLL_MS);
    this.timer.unref();
  }

  /** One look at every upstream; a tick still running skips the next. */
  private tick(): Promise<void> {
    if (this.ticking) return this.ticking;
    this.ticking = Promise.all(
      this.upstreams.map((u) =>
        this.sync(u).catch((err: unknown) =>
          this.log.debug({ upstream: u.id, err: (err as Error).message }, 'upstream sync failed'),
        ),
      ),
    )
      .then(() => undefined)
      .finally(() => (this.ticking = undefined));
    return this.ticking;
  }

  private async sync(upstream: UpstreamConfig): Promise<void> {
    if (isStdioUpstream(upstream)) await this.syncSupervisors(upstream);
    const { catalog, lease } = this.keys.upstream(upstream.id);
    let meta = parseMeta(await this.redis.hget(catalog, 'meta'));
    let due = this.due(upstream, meta);
    if (isStdioUpstream(upstream)) {
      // Read where its server runs, and only while it runs (or never was read): a refresh must
      // not wake a server stopped for idleness. It is read again each time it starts.
      const server = this.stdio?.get(upstream.id);
      const idle = due && server !== undefined && !server.running && meta?.error === undefined;
      due &&= server !== undefined && (server.running || !meta || meta.error !== undefined);
      // Meanwhile the last list stays served: its TTL is renewed, once per refreshSeconds.
      if (
        idle &&
        meta &&
        Date.now() - (this.kept.get(upstream.id) ?? 0) >= upstream.refreshSeconds * 1000
      ) {
        this.kept.set(upstream.id, Date.now());
        await this.redis.expire(catalog, catalogTtlSeconds(upstream));
      }
    }
    if (due) {
      const leaseMs = upstream.timeoutMs * 3 + 5000;
      const got = await this.redis.set(lease, this.token, 'PX', leaseMs, 'NX');
      if (got === 'OK') {
        try {
          // Another process may have refreshed between the read above and the lease.
          meta = parseMeta(await this.redis.hget(catalog, 'meta'));
          if (this.due(upstream, meta)) {
            const early =
              this.changed.has(upstream.id) &&
              !this.started.has(upstream.id) &&
              !this.stale(upstream, meta);
            this.changed.delete(upstream.id);
            this.started.delete(upstream.id);
            meta = await this.refresh(upstream, meta, early);
          }
        } finally {
          await this.redis.eval(RELEASE, 1, lease, this.token).catch(() => undefined);
        }
      }
    }
    if (!meta) return;
    this.metas.set(upstream.id, meta);
    // Under `pin` an approval changes what is served without changing the catalog.
    const pinsVersion = upstream.trust === 'pin' ? await this.pins.version(upstream.id) : '-';
    const version = `${meta.hash}/${pinsVersion}`;
    if (this.applied.get(upstream.id)?.version === version) return;
    let read = this.reads.get(upstream.id);
    if (read?.hash !== meta.hash) {
      const defs = JSON.parse(
        (await this.redis.hget(catalog, 'tools')) ?? '[]',
      ) as UpstreamToolDefinition[];
      read = { hash: meta.hash, tools: defs.map((def) => ({ def, hash: definitionHash(def) })) };
      this.reads.set(upstream.id, read);
    }
    const entries =
      upstream.trust === 'pin' ? await this.pins.entries(upstream.id) : new Map<string, PinEntry>();
    this.apply(upstream, version, read.tools, entries);
  }

  /** The catalog was read longer than `refreshSeconds` ago (or never). */
  private stale(upstream: UpstreamConfig, meta: CatalogMeta | undefined): boolean {
    return !meta || Date.now() - meta.checkedAt >= upstream.refreshSeconds * 1000;
  }

  /**
   * Whether to read the list now: every `refreshSeconds`, and on `list_changed` at once unless
   * a refresh for a notification ran less than `refreshSeconds` ago; then the notifications
   * since are one refresh when that window ends. A flood of them costs one read per window.
   */
  private due(upstream: UpstreamConfig, meta: CatalogMeta | undefined): boolean {
    if (this.stale(upstream, meta) || this.started.has(upstream.id)) return true;
    return (
      this.changed.has(upstream.id) &&
      Date.now() - (meta!.notifiedAt ?? 0) >= upstream.refreshSeconds * 1000
    );
  }

  /**
   * Writes this worker's state of its server (when it changed, else every 10 s), and reads
   * every worker's: one HGETALL per stdio upstream per second, of one field per worker.
   */
  private async syncSupervisors(upstream: UpstreamConfig): Promise<void> {
    const key = this.keys.upstream(upstream.id).supervisors;
    const server = this.stdio?.get(upstream.id);
    const now = Date.now();
    if (server) {
      const snapshot = server.snapshot();
      const text = JSON.stringify(snapshot);
      const last = this.written.get(upstream.id);
      if (last?.text !== text || now - last.at >= SUPERVISOR_WRITE_MS) {
        const entry = JSON.stringify({ ...snapshot, at: now } satisfies SupervisorEntry);
        await this.redis
          .multi()
          .hset(key, this.worker, entry)
          .pexpire(key, SUPERVISOR_TTL_MS)
          .exec();
        this.written.set(upstream.id, { text, at: now });
      }
    }
    const all = await this.redis.hgetall(key);
    const live = new Map<string, SupervisorEntry>();
    for (const [worker, text] of Object.entries(all)) {
      const entry = parseSupervisor(text);
      if (entry && now - entry.at <= SUPERVISOR_STALE_MS) live.set(worker, entry);
      else await this.redis.eval(DELETE_STALE, 1, key, worker, text);
    }
    this.supervisors.set(upstream.id, live);
  }

  /** Each stdio upstream's supervisors, for `/readyz`: state and restarts, per worker. */
  supervisorSummary(): Record<string, SupervisorSummary[]> {
    const out: Record<string, SupervisorSummary[]> = {};
    for (const u of this.upstreams) {
      if (!isStdioUpstream(u)) continue;
      out[u.id] = [...(this.supervisors.get(u.id) ?? new Map<string, SupervisorEntry>())]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([, e]) => ({
          state: e.state,
          restarts: e.restarts,
          ...(e.shared ? { shared: true as const } : {}),
        }));
    }
    return out;
  }

  private supervisorReports(id: string): SupervisorReport[] {
    return [...(this.supervisors.get(id) ?? new Map<string, SupervisorEntry>())]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([worker, e]) => ({
        worker,
        state: e.state,
        since: new Date(e.since).toISOString(),
        restarts: e.restarts,
        ...(e.lastError !== undefined ? { lastError: e.lastError } : {}),
        ...(e.lastErrorAt !== undefined
          ? { lastErrorAt: new Date(e.lastErrorAt).toISOString() }
          : {}),
        ...(e.shared ? { shared: true as const } : {}),
        ...(typeof e.owner === 'string' ? { owner: e.owner } : {}),
        ...(typeof e.followers === 'number' ? { followers: e.followers } : {}),
        seenAt: new Date(e.at).toISOString(),
      }));
  }

  /** Looks at `id` now (after an approval): this process serves the change at once. */
  async syncNow(id: string): Promise<void> {
    const upstream = this.upstreams.find((u) => u.id === id);
    if (upstream) await this.sync(upstream);
  }

  /** The held (pending or quarantined) upstream tool named `name` here, if any. */
  held(name: string): HeldTool | undefined {
    for (const applied of this.applied.values()) {
      const held = applied.held.get(name);
      if (held) return held;
    }
    return undefined;
  }

  has(id: string): boolean {
    return this.upstreams.some((u) => u.id === id);
  }

  /** Approves `tool`'s definition `hash` if it is the current one; audits it. */
  async approve(id: string, tool: string, hash: string, by: string): Promise<ApproveResult> {
    const result = await this.pins.approve(id, tool, hash, by);
    if (result.kind === 'approved') {
      await this.recordEvents(id, [{ tool, kind: 'approved', hash }], by);
      await this.syncNow(id);
    }
    return result;
  }

  /**
   * Every upstream with its tools' pins, definitions and scan flags (`GET /v1/upstreams`):
   * at most 500 tools per upstream, each definition ≤ 64 KiB.
   */
  async report(): Promise<UpstreamReport[]> {
    const out: UpstreamReport[] = [];
    const status = this.status();
    for (const upstream of this.upstreams) {
      const entries = await this.pins.entries(upstream.id);
      const hashes = new Set<string>();
      for (const e of entries.values()) {
        hashes.add(e.current);
        if (e.approved && e.approved !== e.current) hashes.add(e.approved);
      }
      const defs = await this.pins.definitions(upstream.id, [...hashes]);
      const others = this.otherNames(upstream.id);
      const byName = new Map<string, string[]>();
      for (const tool of entries.keys()) {
        const name = upstreamToolName(upstream.id, tool);
        const raw = byName.get(name);
        if (raw) raw.push(tool);
        else byName.set(name, [tool]);
      }
      const tools: UpstreamToolReport[] = [];
      const unenforced: UnenforcedPatternReport[] = [];
      for (const [tool, e] of [...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
        // What this process serves of it (a held or left-out tool has nothing enforced here).
        const served = this.registry.get(upstreamToolName(upstream.id, tool));
        if (served?.category === `upstream:${upstream.id}`)
          for (const p of served.unenforcedPatterns ?? []) unenforced.push({ tool, ...p });
        const current = defs.get(e.current);
        const st: PinStatus = upstream.trust === 'auto' ? 'approved' : pinStatus(e, e.current);
        tools.push({
          tool,
          name: upstreamToolName(upstream.id, tool),
          status: st,
          hash: e.current,
          ...(e.approved ? { approvedHash: e.approved } : {}),
          ...(e.by ? { approvedBy: e.by } : {}),
          ...(e.approvedAt ? { approvedAt: new Date(e.approvedAt).toISOString() } : {}),
          seenAt: new Date(e.seenAt).toISOString(),
          ...(e.changedAt ? { changedAt: new Date(e.changedAt).toISOString() } : {}),
          current: current ?? null,
          ...(e.approved && e.approved !== e.current
            ? { approved: defs.get(e.approved) ?? null }
            : {}),
          flags: current ? scanDefinition(current as UpstreamToolDefinition, others) : [],
          ...collision(byName.get(upstreamToolName(upstream.id, tool))!, tool),
        });
      }
      const meta = this.metas.get(upstream.id);
      const problems = [
        ...(meta?.problems ?? []),
        ...(this.applied.get(upstream.id)?.problems ?? []),
      ].slice(0, CATALOG_LIMITS.maxProblems);
      out.push({
        id: upstream.id,
        trust: upstream.trust,
        state: status[upstream.id]?.state ?? 'unknown',
        ...(meta ? { checkedAt: new Date(meta.checkedAt).toISOString() } : {}),
        ...(isStdioUpstream(upstream) ? { supervisors: this.supervisorReports(upstream.id) } : {}),
        tools,
        leftOut: { count: status[upstream.id]?.skipped ?? 0, problems },
        unenforcedPatterns: unenforced,
      });
    }
    return out;
  }

  /** Names a description of upstream `id` should not mention: every tool that is not its own. */
  private otherNames(id: string): Set<string> {
    const names = new Set<string>();
    for (const t of this.registry.list()) if (t.category !== `upstream:${id}`) names.add(t.name);
    for (const [other, read] of this.reads) {
      if (other === id) continue;
      for (const { def } of read.tools) {
        names.add(def.name);
        names.add(upstreamToolName(other, def.name));
      }
    }
    return names;
  }

  /** Audit entries of pin events: `by` the admin who approved, else `auto` or `system`. */
  private async recordEvents(id: string, events: PinEvent[], admin?: string): Promise<void> {
    for (const event of events) {
      const by = admin ?? (event.kind === 'approved' ? 'auto' : 'system');
      await this.audit
        .append(
          this.audit.entry({
            event: 'upstream',
            client: `upstream:${id}`,
            tool: upstreamToolName(id, event.tool),
            status: event.kind,
            by,
            hash: event.hash,
          }),
        )
        .catch((err: unknown) =>
          this.log.warn({ upstream: id, err: (err as Error).message }, 'audit entry not written'),
        );
    }
  }

  /** Reads the upstream's tools within the budgets and writes the catalog; returns its meta. */
  private async refresh(
    upstream: UpstreamConfig,
    previous: CatalogMeta | undefined,
    /** Made before `refreshSeconds` were up, for a `list_changed`. */
    early: boolean,
  ): Promise<CatalogMeta> {
    const { catalog } = this.keys.upstream(upstream.id);
    const ttlSeconds = catalogTtlSeconds(upstream);
    const notifiedAt = early ? Date.now() : previous?.notifiedAt;
    let read: { tools: UpstreamToolDefinition[]; problems: string[]; leftOut: number };
    try {
      read = await this.read(upstream);
    } catch (err) {
      const error = (err as Error).message;
      this.log.warn({ upstream: upstream.id, error }, 'upstream tools could not be read');
      // The tools read before stay: calls to them answer upstream_unavailable while it is down.
      const meta: CatalogMeta = {
        checkedAt: Date.now(),
        hash: previous?.hash ?? canonicalDigest([]),
        tools: previous?.tools ?? 0,
        problems: previous?.problems ?? [],
        ...(previous?.leftOut !== undefined ? { leftOut: previous.leftOut } : {}),
        error: error.slice(0, 500),
        ...(previous?.pinned ? { pinned: previous.pinned } : {}),
        ...(notifiedAt !== undefined ? { notifiedAt } : {}),
      };
      await this.redis
        .multi()
        .hset(catalog, 'meta', JSON.stringify(meta))
        .expire(catalog, ttlSeconds)
        .exec();
      return meta;
    }
    const hash = canonicalDigest(read.tools);
    // The pins first: a process that sees the new catalog sees its pins too.
    if (previous?.pinned !== hash) {
      const events = await this.pins.record(
        upstream.id,
        upstream.trust,
        read.tools.map((def) => ({ def, hash: definitionHash(def) })),
      );
      for (const e of events.filter((e) => e.kind === 'quarantined'))
        this.log.warn(
          { upstream: upstream.id, tool: e.tool },
          'upstream tool quarantined: its definition changed',
        );
      await this.recordEvents(upstream.id, events);
    }
    const meta: CatalogMeta = {
      checkedAt: Date.now(),
      hash,
      tools: read.tools.length,
      problems: read.problems,
      leftOut: read.leftOut,
      pinned: hash,
      ...(notifiedAt !== undefined ? { notifiedAt } : {}),
    };
    for (const problem of read.problems)
      this.log.warn({ upstream: upstream.id, problem }, 'upstream tool left out');
    const write = this.redis.multi();
    if (previous?.hash !== hash) write.hset(catalog, 'tools', JSON.stringify(read.tools));
    await write.hset(catalog, 'meta', JSON.stringify(meta)).expire(catalog, ttlSeconds).exec();
    if (previous?.hash !== hash)
      this.log.info({ upstream: upstream.id, tools: read.tools.length }, 'upstream tools read');
    return meta;
  }

  /** Every page of `tools/list`, cut at the budgets, filtered by the allow-list. */
  private async read(
    upstream: UpstreamConfig,
  ): Promise<{ tools: UpstreamToolDefinition[]; problems: string[]; leftOut: number }> {
    let connection = this.listing.get(upstream.id);
    if (!connection) {
      const changed = () => {
        // One look per burst: while a change waits for its window, the next ones are the same.
        if (this.changed.has(upstream.id)) return;
        // Another process may hold the lease now: it reads the list on its next tick.
        this.changed.add(upstream.id);
        void this.tick();
      };
      const server = this.stdio?.get(upstream.id);
      if (server)
        server.onStarted = () => {
          // A server (re)started is read at once, whatever the window: it is a new server.
          this.started.add(upstream.id);
          void this.tick();
        };
      connection = new UpstreamConnection(upstream, this.fetchImpl, changed, server);
      this.listing.set(upstream.id, connection);
    }
    const allowed = upstream.tools ? new Set(upstream.tools) : undefined;
    const tools: UpstreamToolDefinition[] = [];
    const problems: string[] = [];
    let leftOut = 0;
    const report = (problem: string) => {
      leftOut++;
      if (problems.length < CATALOG_LIMITS.maxProblems) problems.push(problem);
    };
    /** Why the reading stopped: said first, whatever came before. */
    let stopped: string | undefined;
    const stop = (problem: string) => {
      leftOut++;
      stopped = problem;
    };
    let bytes = 0;
    /** Bytes of the answers read, every page's: the listing's own budget. */
    let answered = 0;
    /** Why no further page is read, once a byte budget is spent. */
    let spent: string | undefined;
    let cursor: string | undefined;
    const signal = AbortSignal.timeout(upstream.timeoutMs * 2);
    for (let page = 0; ; page++) {
      if (page >= CATALOG_LIMITS.maxPages) {
        stop(`tools/list has more than ${CATALOG_LIMITS.maxPages} pages: the rest is left out`);
        break;
      }
      if (spent !== undefined) {
        // The pages after this one are not asked for: a flood of them costs nothing.
        stop(`${spent}: the pages after page ${page} are not read`);
        break;
      }
      const left = CATALOG_LIMITS.maxListingBytes - answered;
      let result: Awaited<ReturnType<UpstreamConnection['listPage']>>;
      try {
        result = await connection.listPage(cursor, signal, left);
      } catch (err) {
        // The first page is held to one answer's cap, as any; past it, the earlier pages stay.
        if (!(err instanceof ListingTooLarge) || page === 0) throw err;
        stop(
          `the tools/list answers passed ${CATALOG_LIMITS.maxListingBytes} bytes at page ${page + 1}: it and later pages are left out`,
        );
        break;
      }
      answered += result.bytes;
      for (const tool of result.tools) {
        if (allowed && !allowed.has(tool.name)) continue;
        const def = definitionOf(tool);
        const size = Buffer.byteLength(JSON.stringify(def));
        // A stdio answer is not counted as it arrives (its transport caps each message).
        if (result.bytes === 0) answered += size;
        if (size > CATALOG_LIMITS.maxToolBytes) {
          report(
            `"${tool.name.slice(0, 64)}": its definition has ${size} bytes (at most ${CATALOG_LIMITS.maxToolBytes})`,
          );
        } else if (tools.length >= CATALOG_LIMITS.maxTools) {
          report(
            `more than ${CATALOG_LIMITS.maxTools} tools: "${tool.name.slice(0, 64)}" and later ones are left out`,
          );
        } else if (spent !== undefined) {
          leftOut++; // said once, below
        } else if (bytes + size > CATALOG_LIMITS.maxCatalogBytes) {
          spent = `the catalog passed ${CATALOG_LIMITS.maxCatalogBytes} bytes`;
          report(
            `the catalog passed ${CATALOG_LIMITS.maxCatalogBytes} bytes at "${tool.name.slice(0, 64)}": it and later tools are left out`,
          );
        } else {
          tools.push(def);
          bytes += size;
        }
      }
      cursor = typeof result.nextCursor === 'string' ? result.nextCursor : undefined;
      if (cursor === undefined) break;
      if (answered >= CATALOG_LIMITS.maxListingBytes)
        spent ??= `the tools/list answers passed ${CATALOG_LIMITS.maxListingBytes} bytes`;
    }
    tools.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    if (stopped !== undefined) {
      problems.unshift(stopped);
      problems.length = Math.min(problems.length, CATALOG_LIMITS.maxProblems);
    }
    return { tools, problems, leftOut };
  }

  /**
   * Replaces the upstream's tools in the registry with `defs` (synchronously: a listing never
   * sees half of it). A name taken by another tool, two tools with one name, or a schema that
   * does not compile leaves that tool out and is logged naming both.
   */
  private apply(
    upstream: UpstreamConfig,
    version: string,
    defs: readonly { def: UpstreamToolDefinition; hash: string }[],
    pins: ReadonlyMap<string, PinEntry>,
  ): void {
    const before = this.applied.get(upstream.id)?.names ?? [];
    for (const name of before) this.registry.unregister(name);
    const names: string[] = [];
    const held = new Map<string, HeldTool>();
    let skipped = 0;
    const problems: string[] = [];
    const leaveOut = (problem: string, count = 1) => {
      skipped += count;
      if (problems.length < CATALOG_LIMITS.maxProblems) problems.push(problem);
      this.log.warn({ upstream: upstream.id, problem }, 'upstream tool left out');
    };
    // Two of its tools that become one name are both left out, whatever their pins: which of
    // them a call, an approval or an `approval:` entry meant cannot be told apart.
    const byName = new Map<string, string[]>();
    for (const { def } of defs) {
      const name = upstreamToolName(upstream.id, def.name);
      const raw = byName.get(name);
      if (raw) raw.push(def.name);
      else byName.set(name, [def.name]);
    }
    for (const [name, raw] of byName) {
      if (raw.length < 2) continue;
      const quoted = raw.slice(0, 5).map((r) => `"${r.slice(0, 64)}"`);
      const list =
        raw.length > 5
          ? `${quoted.join(', ')} and ${raw.length - 5} more`
          : `${quoted.slice(0, -1).join(', ')} and ${quoted.at(-1)!}`;
      const all = raw.length === 2 ? 'both' : 'all';
      leaveOut(
        `upstream "${upstream.id}" tools ${list} ${all} become "${name}": none of them is served`,
        raw.length,
      );
    }
    const started = performance.now();
    for (const { def, hash } of defs) {
      const name = upstreamToolName(upstream.id, def.name);
      if (byName.get(name)!.length > 1) continue;
      // Under `pin` only the very definition approved is served: its hash, not the pin's
      // `current`, so a catalog and pins read a moment apart never serve an unapproved one.
      const status = upstream.trust === 'pin' ? pinStatus(pins.get(def.name), hash) : 'approved';
      if (status !== 'approved') {
        held.set(name, { upstream: upstream.id, tool: def.name, name, status });
        continue;
      }
      let problem: string | undefined;
      if (performance.now() - started > CATALOG_LIMITS.compileBudgetMs) {
        problem = `upstream "${upstream.id}": compiling its schemas took over ${CATALOG_LIMITS.compileBudgetMs} ms; "${def.name}" and later tools are left out`;
      } else if (this.registry.get(name)) {
        problem = `upstream "${upstream.id}" tool "${def.name}" becomes "${name}", the name of a tool toolgate already has`;
      } else {
        try {
          this.registry.register(upstreamToolSpec(upstream, def));
          names.push(name);
        } catch (err) {
          problem = `upstream "${upstream.id}" tool "${def.name}": ${(err as Error).message}`;
        }
      }
      if (problem) leaveOut(problem);
    }
    this.applied.set(upstream.id, { version, names, skipped, problems, held });
  }
}

/** The report's `leftOut` of `tool` when others of `raw` (its name's tools) share its name. */
function collision(raw: readonly string[], tool: string): { leftOut?: string } {
  if (raw.length < 2) return {};
  const others = raw.filter((r) => r !== tool).slice(0, 5);
  return {
    leftOut: `not served: ${others.map((o) => `"${o.slice(0, 64)}"`).join(', ')}${raw.length > 6 ? ' and more' : ''} ${others.length > 1 ? 'become' : 'becomes'} the same name`,
  };
}

function parseSupervisor(text: string): SupervisorEntry | undefined {
  try {
    const e = JSON.parse(text) as Partial<SupervisorEntry>;
    return typeof e.state === 'string' && typeof e.at === 'number' && typeof e.since === 'number'
      ? (e as SupervisorEntry)
      : undefined;
  } catch {
    return undefined;
  }
}

function parseMeta(text: string | null): CatalogMeta | undefined {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as CatalogMeta;
  } catch {
    return undefined;
  }
}
