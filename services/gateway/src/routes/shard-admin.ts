/**
 * Admin views across Redis shards (docs/sharding.md): on a sharded deployment an admin's
 * listings read every shard and merge, and an admin's action on one client's data (or on a call
 * or session, wherever it is) runs on that shard's stack. A shard that is down leaves the
 * merged answer to the others and is named in `Toolgate-Shards-Unavailable`. Requests of
 * clients that are not admins pass through to their own shard's routes untouched.
 */
import type { CallBrief, StatsReport, ToolStats } from '@toolgate/calls';
import { isCallId, isConnectionLost } from '@toolgate/calls';
import type { ToolRegistry } from '@toolgate/registry';
import {
  Router,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
} from 'express';
import type {
  AdminSessionList,
  ApprovalEvent,
  BudgetReport,
  CallList,
  PendingCount,
  SeriesView,
} from '../api-types.js';
import { ApiError } from '../errors.js';
import { clientOf, requireAdmin } from '../http.js';
import { guardRedis } from '../pipeline.js';
import type { ShardStack } from '../shard-stack.js';
import { openEventStream, type EventStream } from '../sse.js';
import { callListItem, pendingApproval } from '../views.js';
import { auditQuery } from './admin.js';
import { budgetView } from './budget.js';
import { callListQuery } from './calls.js';
import { adminSessionView, adminSessionsLimit } from './sessions.js';

/** The header naming the shards (comma-separated ids) a merged answer could not read. */
export const SHARDS_UNAVAILABLE = 'Toolgate-Shards-Unavailable';
/** Pending approvals one listing shows (as on one shard: the oldest). */
const PENDING_LISTED = 200;
/** Rankings, recent and slowest calls list this many (as Stats.report does on one shard). */
const RANKED = 10;
const RECENT_LISTED = 100;
const SLOWEST_LISTED = 50;

export interface ShardAdminOptions {
  stacks: readonly ShardStack[];
  /** The stack of the shard a client is on now (its configured one, or a move's). */
  stackOf: (clientId: string) => ShardStack;
  /** Every configured client id (the dev key's `dev` without clients). */
  clientIds: readonly string[];
  /** Each configured client's `limits.pendingApprovals`. */
  pendingLimits: ReadonlyMap<string, number>;
  registry: ToolRegistry;
}

/** What each shard that answered gave, and the ids of those that could not. */
interface Gathered<T> {
  answers: { stack: ShardStack; value: T }[];
  down: string[];
}

/** The admin routes that span shards; mounted before each client's shard router. */
export function shardAdminRoutes(o: ShardAdminOptions): Router {
  const { stacks, stackOf } = o;
  const configured = new Set(o.clientIds);
  const router = Router();

  /** Runs `read` on every shard; a shard whose Redis is down is named instead of failing all. */
  async function gather<T>(read: (stack: ShardStack) => Promise<T>): Promise<Gathered<T>> {
    const settled = await Promise.allSettled(
      // A shard lost after being up fails at once (guardRedis); one still connecting (a
      // gateway just started) is waited for, as a client's own request would be.
      stacks.map((stack) => guardRedis(() => read(stack), stack.redis)),
    );
    const out: Gathered<T> = { answers: [], down: [] };
    let failure: unknown;
    settled.forEach((r, i) => {
      const stack = stacks[i]!;
      if (r.status === 'fulfilled') out.answers.push({ stack, value: r.value });
      else if (r.reason instanceof ApiError && r.reason.code === 'shard_unavailable')
        out.down.push(stack.shard.id);
      else failure ??= r.reason;
    });
    if (failure !== undefined) throw failure;
    if (out.answers.length === 0) throw unavailable(out.down);
    return out;
  }
  const tellDown = (res: Response, down: readonly string[]) => {
    if (down.length > 0) res.set(SHARDS_UNAVAILABLE, down.join(','));
  };
  /** Hands the request to a shard's own routes (as if the caller's data lived there). */
  const on = (stack: ShardStack, req: Request, res: Response, next: NextFunction) =>
    stack.router(req, res, next);
  const admin = (res: Response) => clientOf(res).admin;
  /** A configured client named in the query (`?client=`), else undefined. */
  const namedClient = (req: Request) => {
    const c = req.query.client;
    return typeof c === 'string' && configured.has(c) ? c : undefined;
  };

  // An admin's request costs one call of the admin's rate, on the admin's own shard, once: a
  // merged view is charged here, one served on another shard's router is not charged again.
  router.use((req, res, next) => {
    if (!admin(res)) return next();
    stackOf(clientOf(res).id).charge(req, res, next);
  });

  // One client's data (its secrets, its workspaces' reset ids): on its shard, where its worker
  // lane reads them (docs/sharding.md), whoever the admin is.
  router.all(
    ['/v1/workspaces/:client', '/v1/secrets/:client', '/v1/secrets/:client/:name'],
    (req, res, next) => {
      const client = (req.params as { client: string }).client;
      if (!admin(res) || !configured.has(client)) {
        next();
        return;
      }
      on(stackOf(client), req, res, next);
    },
  );
  router.get(['/v1/stats', '/v1/budget', '/v1/calls'], (req, res, next) => {
    const client = namedClient(req);
    if (!admin(res) || client === undefined) {
      next();
      return;
    }
    on(stackOf(client), req, res, next);
  });

  /**
   * An admin's request about a call or session, wherever it is: served on the shard whose Redis
   * knows its id (`find` on each); a 503 when it is on none that answered and one did not.
   */
  const onHolder =
    (find: (stack: ShardStack, id: string) => Promise<unknown>): RequestHandler =>
    async (req, res, next) => {
      const id = (req.params as { id: string }).id;
      if (!admin(res) || !isCallId(id)) {
        next();
        return;
      }
      const found = await gather((s) => find(s, id));
      const holder = found.answers.find((a) => a.value !== undefined);
      if (holder) {
        on(holder.stack, req, res, next);
        return;
      }
      if (found.down.length > 0) throw unavailable(found.down);
      next();
    };
  router.all(
    ['/v1/calls/:id', '/v1/calls/:id/:action', '/v1/approvals/:id/:decision'],
    onHolder((s, id) => s.dispatcher.lookup(id)),
  );
  router.delete(
    '/v1/admin/sessions/:id',
    onHolder((s, id) => s.sessions.get(id)),
  );

  router.get('/v1/approvals', requireAdmin, async (_req, res) => {
    const { pending, down } = await pendingEverywhere();
    tellDown(res, down);
    res.json(pending.pending.map(pendingApproval));
  });

  /** Every shard's pending calls: the oldest PENDING_LISTED of them, and the counts. */
  async function pendingEverywhere() {
    const clientIds = [...o.pendingLimits.keys()];
    const { answers, down } = await gather((s) => s.approvals.pending(clientIds));
    const byClient: Record<string, number> = {};
    let total = 0;
    const all: CallBrief[] = [];
    for (const { value } of answers) {
      total += value.total;
      all.push(...value.pending);
      for (const [c, n] of Object.entries(value.byClient)) byClient[c] = (byClient[c] ?? 0) + n;
    }
    all.sort((a, b) => a.createdAt - b.createdAt);
    return { pending: { pending: all.slice(0, PENDING_LISTED), total, byClient }, down };
  }

  /** The console's feed: one snapshot of every shard, then the events of each shard's feed. */
  router.get('/v1/approvals/events', requireAdmin, async (_req, res) => {
    const client = clientOf(res);
    const held = await stackOf(client.id).held.hold(res, client);
    try {
      if (held.signal.aborted) return;
      const up = stacks.filter((s) => !isConnectionLost(s.redis));
      let events: EventStream | undefined;
      const queued: ApprovalEvent[] = [];
      const stops: (() => void)[] = [];
      try {
        // Subscribed before the snapshot is read, so nothing falls between the two.
        for (const s of up)
          stops.push(
            await s.feed.subscribe((event) => {
              if (events) events.send(event.type, event);
              else queued.push(event);
            }),
          );
        const { pending, down } = await pendingEverywhere();
        tellDown(res, down);
        const stream = openEventStream(res, held.signal);
        try {
          const snapshot: ApprovalEvent = {
            type: 'snapshot',
            pending: pending.pending.map(pendingApproval),
            total: pending.total,
            byClient: Object.fromEntries(
              [...o.pendingLimits].map(([c, limit]): [string, PendingCount] => [
                c,
                { pending: pending.byClient[c] ?? 0, limit },
              ]),
            ),
            ...(down.length > 0 ? { unavailableShards: down } : {}),
          };
          stream.send('snapshot', snapshot);
          events = stream;
          for (const event of queued.splice(0)) stream.send(event.type, event);
          await stream.closed;
        } finally {
          stream.end();
        }
      } finally {
        for (const stop of stops) stop();
      }
    } finally {
      held.release();
    }
  });

  router.get('/v1/audit', requireAdmin, async (req, res) => {
    const query = auditQuery(req);
    const limit = query.limit ?? 100;
    const { answers, down } = await gather((s) => s.audit.recent(query));
    const entries = answers
      .flatMap((a) => a.value.entries)
      .sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0))
      .slice(0, limit);
    if (entries.length < limit && answers.some((a) => a.value.partial))
      res.set('Toolgate-Partial', 'true');
    tellDown(res, down);
    res.json(entries);
  });

  router.get('/v1/calls', async (req, res, next) => {
    if (!admin(res)) {
      next();
      return;
    }
    const query = callListQuery(req);
    const { answers, down } = await gather((s) => s.pipeline.list(clientOf(res), query));
    const calls = answers
      .flatMap((a) => a.value.calls)
      .sort((a, b) => b.createdAt - a.createdAt)
      .slice(0, query.limit);
    const partial = calls.length < query.limit && answers.some((a) => a.value.partial);
    tellDown(res, down);
    const body: CallList = { calls: calls.map(callListItem), ...(partial ? { partial } : {}) };
    res.json(body);
  });

  router.get('/v1/stats', async (req, res, next) => {
    if (!admin(res) || req.query.client !== undefined) {
      next();
      return;
    }
    const { answers, down } = await gather(async (s) =>
      s.stats.report({ cacheKeys: await s.cache.size() }),
    );
    tellDown(res, down);
    res.json(mergeStats(answers.map((a) => a.value)));
  });

  router.get('/v1/budget', async (req, res, next) => {
    if (!admin(res) || req.query.client !== undefined) {
      next();
      return;
    }
    const down = new Set<string>();
    const found = await Promise.all(
      o.clientIds
        .filter((id) => stackOf(id).budgets.has(id))
        .map(async (id) => {
          const stack = stackOf(id);
          try {
            const use = await guardRedis(() => stack.budgets.use(id), stack.redis);
            return { client: id, budget: budgetView(use.client) };
          } catch (err) {
            if (!(err instanceof ApiError && err.code === 'shard_unavailable')) throw err;
            down.add(stack.shard.id);
            return undefined;
          }
        }),
    );
    tellDown(res, [...down]);
    res.json({ clients: found.filter((c) => c !== undefined) } satisfies BudgetReport);
  });

  // The console's gauges and per-tool series: every shard's, summed (docs/http-api.md).
  router.get('/v1/series', async (req, res, next) => {
    if (!admin(res)) {
      next();
      return;
    }
    const text = req.query.minutes ?? '60';
    const minutes = typeof text === 'string' && /^\d+$/.test(text) ? Number(text) : 0;
    // One user's row, or a bad query: the client's shard, or the admin's, answers it as ever.
    if (req.query.user !== undefined || minutes < 1 || minutes > 120) {
      const client = namedClient(req);
      if (client !== undefined && req.query.user !== undefined) on(stackOf(client), req, res, next);
      else next();
      return;
    }
    const now = Date.now();
    const { answers, down } = await gather((s) =>
      s.series.read(minutes, () => true, undefined, now),
    );
    const [first, ...rest] = answers.map((a) => a.value);
    const merged = first!;
    for (const p of rest) {
      for (const [tool, t] of Object.entries(p.tools)) {
        const m = (merged.tools[tool] ??= {
          calls: t.calls.map(() => 0),
          errors: t.errors.map(() => 0),
          p95Ms: t.p95Ms.map(() => null),
        });
        t.calls.forEach((n, i) => (m.calls[i] = (m.calls[i] ?? 0) + n));
        t.errors.forEach((n, i) => (m.errors[i] = (m.errors[i] ?? 0) + n));
        t.p95Ms.forEach((n, i) => (m.p95Ms[i] = maxOf(m.p95Ms[i] ?? null, n)));
      }
      merged.queue.fast = merged.queue.fast.map((n, i) => sumOf(n, p.queue.fast[i] ?? null));
      merged.queue.sandbox = merged.queue.sandbox.map((n, i) =>
        sumOf(n, p.queue.sandbox[i] ?? null),
      );
      // Workers serve every shard and beat on each: the same fleet seen from each shard.
      merged.workers = merged.workers.map((n, i) => maxOf(n, p.workers[i] ?? null));
      merged.warm = merged.warm.map((n, i) => maxOf(n, p.warm[i] ?? null));
    }
    const client = clientOf(res);
    const tools = Object.fromEntries(
      Object.entries(merged.tools).filter(([name]) => {
        const tool = o.registry.get(name);
        return tool !== undefined && client.scope.allows(tool);
      }),
    );
    tellDown(res, down);
    const body: SeriesView = {
      from: new Date(merged.from).toISOString(),
      stepSeconds: 60,
      points: merged.points,
      tools,
      queue: merged.queue,
      workers: merged.workers,
      warm: merged.warm,
    };
    res.json(body);
  });

  router.get('/v1/admin/sessions', requireAdmin, async (req, res) => {
    const limit = adminSessionsLimit(req);
    const { answers, down } = await gather((s) => s.sessions.listAll(limit));
    const all = answers.flatMap((a) => a.value.sessions).sort((a, b) => a.createdAt - b.createdAt);
    tellDown(res, down);
    const body: AdminSessionList = {
      sessions: all.slice(0, limit).map(adminSessionView),
      total: answers.reduce((n, a) => n + a.value.total, 0),
      truncated: all.length > limit || answers.some((a) => a.value.truncated),
    };
    res.json(body);
  });

  return router;
}

/** 503 `shard_unavailable` naming shards a request needed and could not read. */
function unavailable(down: readonly string[]): ApiError {
  return new ApiError(
    'shard_unavailable',
    `Redis shard${down.length > 1 ? 's' : ''} ${down.map((d) => `"${d}"`).join(', ')} unavailable`,
    {
      headers: { 'Retry-After': '2', [SHARDS_UNAVAILABLE]: down.join(',') },
      details: { shard: down[0], shards: down },
    },
  );
}

const sumOf = (a: number | null, b: number | null) =>
  a === null && b === null ? null : (a ?? 0) + (b ?? 0);
const maxOf = (a: number | null, b: number | null) =>
  a === null ? b : b === null ? a : Math.max(a, b);
const round = (n: number, digits: number) => Number(n.toFixed(digits));

/**
 * Every shard's stats as one report: counts summed per tool, averages weighted by calls; a
 * tool's p95 is the highest shard's (each shard keeps its own sample); recent and slowest calls
 * merged, as long as one shard's lists.
 */
export function mergeStats(reports: readonly StatsReport[]): StatsReport {
  if (reports.length === 1) return reports[0]!;
  const tools = new Map<string, ToolStats & { totalMs: number }>();
  for (const r of reports)
    for (const t of r.tools) {
      const m = tools.get(t.tool);
      if (!m) {
        tools.set(t.tool, { ...t, totalMs: t.avgMs * t.calls });
        continue;
      }
      m.calls += t.calls;
      m.ok += t.ok;
      m.errors += t.errors;
      m.cancelled += t.cancelled;
      m.cached += t.cached;
      m.totalMs += t.avgMs * t.calls;
      m.p95Ms = Math.max(m.p95Ms, t.p95Ms);
    }
  const list: ToolStats[] = [...tools.values()]
    .map(({ totalMs, ...t }) => ({
      ...t,
      errorRate: t.calls ? round(t.errors / t.calls, 4) : 0,
      avgMs: t.calls ? round(totalMs / t.calls, 2) : 0,
    }))
    .sort((a, b) => a.tool.localeCompare(b.tool));
  const top = (key: (t: ToolStats) => number) =>
    list
      .filter((t) => t.calls > 0)
      .sort((a, b) => key(b) - key(a) || a.tool.localeCompare(b.tool))
      .slice(0, RANKED)
      .map((t) => t.tool);
  const hits = reports.reduce((n, r) => n + r.cache.hits, 0);
  const misses = reports.reduce((n, r) => n + r.cache.misses, 0);
  const withKeys = reports.some((r) => r.cache.keys !== undefined);
  return {
    tools: list,
    rankings: {
      mostCalled: top((t) => t.calls),
      highestErrorRate: top((t) => t.errorRate),
      slowestP95: top((t) => t.p95Ms),
    },
    slowestCalls: reports
      .flatMap((r) => r.slowestCalls)
      .sort((a, b) => b.durationMs - a.durationMs)
      .slice(0, SLOWEST_LISTED),
    recent: reports
      .flatMap((r) => r.recent)
      .sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0))
      .slice(0, RECENT_LISTED),
    cache: {
      hits,
      misses,
      hitRate: hits + misses ? round(hits / (hits + misses), 4) : 0,
      ...(withKeys
        ? {
            keys: reports.reduce((n, r) => n + (r.cache.keys ?? 0), 0),
            evictions: reports.reduce((n, r) => n + (r.cache.evictions ?? 0), 0),
          }
        : {}),
    },
  };
}
