import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { CallIndex } from './call-index.js';
import type { Keys } from './keys.js';
import type { Series } from './series.js';
import type { CallOutcome } from './types.js';
import { Upkeep } from './upkeep.js';

const SAMPLE_SIZE = 1000;
const RECENT_SIZE = 100;
const SLOWEST_SIZE = 50;
/** Per-client duration samples are smaller: there is one per client and tool. */
const CLIENT_SAMPLE_SIZE = 200;
/**
 * Lists and sorted sets are trimmed at most once a second per process, or sooner once their
 * cap's worth was added since: each holds at most twice its cap.
 */
const TRIM_EVERY_MS = 1000;
/**
 * Users whose stats a client keeps: users are unbounded (any token's user claim), so past this
 * the user whose last call is oldest is dropped with the next call of a new one.
 */
export const USER_STATS_MAX = 1000;
/** Users a client's report shows, most recently active first. */
export const USER_STATS_SHOWN = 100;

/**
 * Adds calls to a client's per-user stats and drops the users past USER_STATS_MAX whose last
 * call is oldest, in one step (a check and its eviction must not be split).
 *   KEYS: counts hash, users-seen sorted set
 *   ARGV: cap, now ms, then per user: user, calls, errors, total ms
 */
const USER_STATS = `
for i = 3, #ARGV, 4 do
  local u = ARGV[i]
  redis.call('HINCRBY', KEYS[1], 'calls:' .. u, ARGV[i + 1])
  if ARGV[i + 2] ~= '0' then redis.call('HINCRBY', KEYS[1], 'errors:' .. u, ARGV[i + 2]) end
  redis.call('HINCRBYFLOAT', KEYS[1], 'ms:' .. u, ARGV[i + 3])
  redis.call('ZADD', KEYS[2], ARGV[2], u)
end
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[1])
if over > 0 then
  for _, u in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('HDEL', KEYS[1], 'calls:' .. u, 'errors:' .. u, 'ms:' .. u)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
`;

/** A finished call as the stats count it. */
export interface StatCall {
  outcome: CallOutcome;
  clientId: string;
  /** The user the client acted for, when known (its client's per-user stats). */
  user?: string;
}

/** One user's calls in its client's stats. */
export interface UserStats {
  user: string;
  calls: number;
  errors: number;
  avgMs: number;
}
/** The sets that list tools with stats are re-added once a minute per process. */
const LIST_EVERY_MS = 60_000;

/** The keys one view of the stats lives under: everyone's (admins), or one client's. */
interface StatKeys {
  tools: string;
  tool(name: string): string;
  durations(name: string): string;
  recent: string;
  slowest: string;
  cache: string;
  sampleSize: number;
}

/** Which stats a report shows. */
export interface StatsView {
  /** Only this client's calls; everyone's when absent. */
  client?: string;
  /**
   * With `client`: a caller signed in as a user: its own row in `users` and its own calls in
   * `recent` and `slowestCalls` (the per-tool counters stay the client's).
   */
  user?: string;
  /** Only tools this returns true for (the caller's scope). */
  tools?: (name: string) => boolean;
  /** Live cache keys; the report's cache keys/evictions (shared by all clients) only with it. */
  cacheKeys?: number;
}

export interface ToolStats {
  tool: string;
  calls: number;
  ok: number;
  errors: number;
  /** Stopped by a cancel: neither ok nor an error, and out of the error rate. */
  cancelled: number;
  errorRate: number;
  cached: number;
  avgMs: number;
  p95Ms: number;
}

export interface CallSummary {
  id: string;
  tool: string;
  client: string;
  user?: string;
  status: CallOutcome['status'];
  errorCode?: string;
  durationMs: number;
  cached: boolean;
  at: string;
}

export interface StatsReport {
  tools: ToolStats[];
  rankings: { mostCalled: string[]; highestErrorRate: string[]; slowestP95: string[] };
  slowestCalls: CallSummary[];
  recent: CallSummary[];
  /** keys and evictions count the whole shared cache: in admin reports only. */
  cache: { hits: number; misses: number; hitRate: number; keys?: number; evictions?: number };
  /**
   * One client's report: its users, most recently active first (USER_STATS_SHOWN at most, of
   * the USER_STATS_MAX it keeps); a caller signed in as a user sees only its own row.
   */
  users?: UserStats[];
}

/**
 * Call statistics in Redis, so they survive restarts and add up across workers: counters per
 * tool, a sample of recent durations per tool (for p95), recent calls, slowest calls. Each
 * call counts twice, in everyone's stats and in its client's own, so a client's report never
 * reads another client's calls; both are bounded (clients come from the config, lists capped).
 */
export class Stats {
  private readonly trims = new Upkeep(TRIM_EVERY_MS);
  private readonly listed = new Upkeep(LIST_EVERY_MS);

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    /** Also written with every finished call: the console's time series and call index. */
    private readonly also: { series?: Series; index?: CallIndex } = {},
  ) {}

  /** Adds one finished call to a MULTI/pipeline the caller is building. */
  addTo(multi: ChainableCommander, outcome: CallOutcome, clientId: string, user?: string): void {
    this.addBatch(multi, [{ outcome, clientId, ...(user === undefined ? {} : { user }) }]);
  }

  /**
   * Adds many finished calls in a few commands: counters summed per tool, list and sorted-set
   * pushes in one command each, trimmed once; then the same per client.
   */
  addBatch(
    multi: ChainableCommander,
    calls: readonly StatCall[],
    /**
     * Also add the calls to their clients' index; false: the caller did already; 'upkeep': a
     * queue's FINISH did, keep the index trimmed and expiring only.
     */
    { index = true }: { index?: boolean | 'upkeep' } = {},
  ): void {
    if (calls.length === 0) return;
    const at = new Date().toISOString();
    this.write(multi, this.statKeys(), calls, at);
    this.also.series?.addTo(multi, calls);
    const byClient = new Map<string, StatCall[]>();
    for (const call of calls) {
      let list = byClient.get(call.clientId);
      if (!list) byClient.set(call.clientId, (list = []));
      list.push(call);
    }
    for (const [clientId, list] of byClient) {
      this.write(multi, this.statKeys(clientId), list, at);
      this.writeUsers(multi, clientId, list);
      if (index === 'upkeep') this.also.index?.upkeepTo(multi, clientId, list.length);
      else if (index)
        this.also.index?.addTo(
          multi,
          clientId,
          list.map((c) => c.outcome.id),
        );
    }
  }

  /** A client's calls made for users, per user: one script per client and batch. */
  private writeUsers(
    multi: ChainableCommander,
    clientId: string,
    calls: readonly StatCall[],
  ): void {
    const perUser = new Map<string, { calls: number; errors: number; ms: number }>();
    for (const { outcome, user } of calls) {
      if (user === undefined) continue;
      let u = perUser.get(user);
      if (!u) perUser.set(user, (u = { calls: 0, errors: 0, ms: 0 }));
      u.calls++;
      if (outcome.status === 'error') u.errors++;
      u.ms += outcome.durationMs;
    }
    if (perUser.size === 0) return;
    const { counts, seen } = this.keys.userStats(clientId);
    multi.eval(
      USER_STATS,
      2,
      counts,
      seen,
      USER_STATS_MAX,
      Date.now(),
      ...[...perUser].flatMap(([user, u]) => [user, u.calls, u.errors, u.ms]),
    );
  }

  private statKeys(clientId?: string): StatKeys {
    const k = this.keys;
    return clientId === undefined
      ? {
          tools: k.stats('tools'),
          tool: (name) => k.stat('tool', name),
          durations: (name) => k.stat('durations', name),
          recent: k.stats('recent'),
          slowest: k.stats('slowest'),
          cache: k.stats('cache'),
          sampleSize: SAMPLE_SIZE,
        }
      : {
          tools: k.clientStats(clientId, 'tools'),
          tool: (name) => k.clientStat(clientId, 'tool', name),
          durations: (name) => k.clientStat(clientId, 'durations', name),
          recent: k.clientStats(clientId, 'recent'),
          slowest: k.clientStats(clientId, 'slowest'),
          cache: k.clientStats(clientId, 'cache'),
          sampleSize: CLIENT_SAMPLE_SIZE,
        };
  }

  private write(
    multi: ChainableCommander,
    keys: StatKeys,
    calls: readonly StatCall[],
    at: string,
  ): void {
    const perTool = new Map<
      string,
      {
        calls: number;
        ok: number;
        errors: number;
        cancelled: number;
        cached: number;
        totalMs: number;
        durations: number[];
      }
    >();
    const recent: string[] = [];
    const slowest: (string | number)[] = [];
    for (const { outcome, clientId, user } of calls) {
      const summary: CallSummary = {
        id: outcome.id,
        tool: outcome.tool,
        client: clientId,
        ...(user === undefined ? {} : { user }),
        status: outcome.status,
        // Cut: a plugin's tool names its own codes, and these lists are read whole.
        ...(outcome.error ? { errorCode: String(outcome.error.code).slice(0, 128) } : {}),
        durationMs: outcome.durationMs,
        cached: outcome.cached,
        at,
      };
      let t = perTool.get(outcome.tool);
      if (!t)
        perTool.set(
          outcome.tool,
          (t = { calls: 0, ok: 0, errors: 0, cancelled: 0, cached: 0, totalMs: 0, durations: [] }),
        );
      t.calls++;
      if (outcome.status === 'ok') t.ok++;
      else if (outcome.status === 'cancelled') t.cancelled++;
      else t.errors++;
      if (outcome.cached) t.cached++;
      t.totalMs += outcome.durationMs;
      t.durations.push(outcome.durationMs);
      const text = JSON.stringify(summary);
      recent.push(text);
      slowest.push(outcome.durationMs, text);
    }
    const unlisted = [...perTool.keys()].filter((tool) => this.listed.due(`${keys.tools} ${tool}`));
    if (unlisted.length > 0) multi.sadd(keys.tools, ...unlisted);
    const trim = (key: string, added: number, cap: number) => this.trims.due(key, added, cap);
    for (const [tool, t] of perTool) {
      const toolKey = keys.tool(tool);
      multi.hincrby(toolKey, 'calls', t.calls).hincrbyfloat(toolKey, 'totalMs', t.totalMs);
      if (t.ok) multi.hincrby(toolKey, 'ok', t.ok);
      if (t.errors) multi.hincrby(toolKey, 'errors', t.errors);
      if (t.cancelled) multi.hincrby(toolKey, 'cancelled', t.cancelled);
      if (t.cached) multi.hincrby(toolKey, 'cached', t.cached);
      const durations = keys.durations(tool);
      multi.lpush(durations, ...t.durations);
      if (trim(durations, t.durations.length, keys.sampleSize)) {
        multi.ltrim(durations, 0, keys.sampleSize - 1);
      }
    }
    multi.lpush(keys.recent, ...recent).zadd(keys.slowest, ...slowest);
    if (trim(keys.recent, recent.length, RECENT_SIZE)) multi.ltrim(keys.recent, 0, RECENT_SIZE - 1);
    if (trim(keys.slowest, recent.length, SLOWEST_SIZE)) {
      multi.zremrangebyrank(keys.slowest, 0, -(SLOWEST_SIZE + 1));
    }
  }

  /** Counts a cache hit or miss (also in the client's own stats when given) or evictions. */
  countCache(
    multi: ChainableCommander,
    field: 'hits' | 'misses' | 'evictions',
    by = 1,
    clientId?: string,
  ): void {
    multi.hincrby(this.keys.stats('cache'), field, by);
    if (clientId !== undefined) multi.hincrby(this.keys.clientStats(clientId, 'cache'), field, by);
  }

  async report(view: StatsView = {}): Promise<StatsReport> {
    const keys = this.statKeys(view.client);
    const visible = view.tools ?? (() => true);
    const names = (await this.redis.smembers(keys.tools)).filter(visible).sort();
    const multi = this.redis.multi();
    for (const name of names) {
      multi.hgetall(keys.tool(name)).lrange(keys.durations(name), 0, keys.sampleSize - 1);
    }
    multi
      .lrange(keys.recent, 0, RECENT_SIZE - 1)
      .zrevrange(keys.slowest, 0, SLOWEST_SIZE - 1)
      .hgetall(keys.cache);
    if (view.client !== undefined)
      multi.zrevrange(this.keys.userStats(view.client).seen, 0, USER_STATS_SHOWN - 1);
    const replies = ((await multi.exec()) ?? []).map(([err, value]) => {
      if (err) throw err;
      return value;
    });
    const tools = names.map((tool, i): ToolStats => {
      const h = replies[2 * i] as Record<string, string>;
      const durations = (replies[2 * i + 1] as string[]).map(Number).sort((a, b) => a - b);
      const calls = Number(h.calls ?? 0);
      const errors = Number(h.errors ?? 0);
      return {
        tool,
        calls,
        ok: Number(h.ok ?? 0),
        errors,
        cancelled: Number(h.cancelled ?? 0),
        errorRate: calls ? round(errors / calls, 4) : 0,
        cached: Number(h.cached ?? 0),
        avgMs: calls ? round(Number(h.totalMs ?? 0) / calls, 2) : 0,
        p95Ms: round(percentile(durations, 95), 2),
      };
    });
    const base = names.length * 2;
    const summaries = (list: string[]) =>
      list
        .map((s) => JSON.parse(s) as CallSummary)
        // A user reads its own calls among its client's recent and slowest, no one else's.
        .filter((c) => visible(c.tool) && (view.user === undefined || c.user === view.user));
    const recent = summaries(replies[base] as string[]);
    const slowestCalls = summaries(replies[base + 1] as string[]);
    const cache = replies[base + 2] as Record<string, string>;
    const users =
      view.client === undefined
        ? undefined
        : await this.users(view.client, (replies[base + 3] as string[]) ?? [], view.user);
    const hits = Number(cache.hits ?? 0);
    const misses = Number(cache.misses ?? 0);
    const top = (key: (t: ToolStats) => number) =>
      [...tools]
        .filter((t) => t.calls > 0)
        .sort((a, b) => key(b) - key(a) || a.tool.localeCompare(b.tool))
        .slice(0, 10)
        .map((t) => t.tool);
    return {
      tools,
      rankings: {
        mostCalled: top((t) => t.calls),
        highestErrorRate: top((t) => t.errorRate),
        slowestP95: top((t) => t.p95Ms),
      },
      slowestCalls,
      recent,
      cache: {
        hits,
        misses,
        hitRate: hits + misses ? round(hits / (hits + misses), 4) : 0,
        ...(view.cacheKeys === undefined
          ? {}
          : { keys: view.cacheKeys, evictions: Number(cache.evictions ?? 0) }),
      },
      ...(users === undefined ? {} : { users }),
    };
  }

  /** The rows of a client's users (`only`: that user's alone, if it has stats). */
  private async users(clientId: string, recent: string[], only?: string): Promise<UserStats[]> {
    const names = only === undefined ? recent : [only];
    if (names.length === 0) return [];
    const fields = names.flatMap((u) => [`calls:${u}`, `errors:${u}`, `ms:${u}`]);
    const values = await this.redis.hmget(this.keys.userStats(clientId).counts, ...fields);
    return names.flatMap((user, i) => {
      const calls = Number(values[3 * i] ?? 0);
      if (calls === 0) return [];
      const errors = Number(values[3 * i + 1] ?? 0);
      const ms = Number(values[3 * i + 2] ?? 0);
      return [{ user, calls, errors, avgMs: round(ms / calls, 2) }];
    });
  }
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

function round(n: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/** How long a call's stats wait for others to share their batch, and the most one holds. */
const BATCH_DELAY_MS = 10;
const BATCH_MAX = 200;
/** How long a batch that failed is tried again (a failover takes seconds) before it is dropped. */
const BATCH_RETRY_FOR_MS = 10_000;

/**
 * The stats (and series) of finished calls in batches: one transaction per `delayMs` or
 * BATCH_MAX calls. The gateway's for the calls it answers itself — cache hits, refusals after
 * acceptance — every BATCH_DELAY_MS, as the worker's recorder writes records; the worker's for
 * sandbox calls over a longer window (see Recorder). The call's record, brief, index entry and
 * audit entry are written by the caller (a lookup right after the answer finds them); only the
 * counters, which nobody reads per call, wait.
 */
export class StatsBatch {
  private pending: StatCall[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly writing = new Set<Promise<void>>();
  private readonly delayMs: number;
  private readonly index: boolean | 'upkeep';

  constructor(
    private readonly redis: RedisClient,
    private readonly stats: Stats,
    private readonly onDropped: (err: unknown, calls: number) => void,
    options: {
      delayMs?: number;
      /** The index's part (see Stats.addBatch); default false: the caller adds the calls. */
      index?: boolean | 'upkeep';
    } = {},
  ) {
    this.delayMs = options.delayMs ?? BATCH_DELAY_MS;
    this.index = options.index ?? false;
  }

  add(outcome: CallOutcome, clientId: string, user?: string): void {
    this.pending.push({ outcome, clientId, ...(user === undefined ? {} : { user }) });
    if (this.pending.length >= BATCH_MAX) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.delayMs);
  }

  /** Writes what is pending now; resolves once every write so far has landed or given up. */
  async drain(): Promise<void> {
    this.flush();
    await Promise.all(this.writing);
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    const write = this.write(batch)
      .catch((err: unknown) => this.onDropped(err, batch.length))
      .finally(() => this.writing.delete(write));
    this.writing.add(write);
  }

  /** One transaction, so a batch tried again never counts a call twice. */
  private async write(batch: StatCall[]): Promise<void> {
    const hits = new Map<string, number>();
    for (const { outcome, clientId } of batch) {
      if (outcome.cached) hits.set(clientId, (hits.get(clientId) ?? 0) + 1);
    }
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      const multi = this.redis.multi();
      this.stats.addBatch(multi, batch, { index: this.index });
      for (const [clientId, n] of hits) this.stats.countCache(multi, 'hits', n, clientId);
      try {
        const failed = ((await multi.exec()) ?? []).find(([err]) => err);
        if (failed) throw failed[0];
        return;
      } catch (err) {
        if (Date.now() - started > BATCH_RETRY_FOR_MS) throw err;
        await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 2000)));
      }
    }
  }
}
