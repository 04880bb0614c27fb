/**
 * Spend budgets per client and per user (`limits.budget`, `limits.perUser.budget`;
 * docs/budgets.md): what each spent per UTC day and month, read at admission and charged when a
 * call ends, inside the worker's RELEASE script (no round trip of its own).
 */
import type { Keys } from './keys.js';
import type { RedisClient } from './redis.js';

export const BUDGET_METRICS = ['calls', 'sandboxSeconds', 'upstreamCalls', 'egressBytes'] as const;
export type BudgetMetric = (typeof BUDGET_METRICS)[number];
export const BUDGET_WINDOWS = ['day', 'month'] as const;
export type BudgetWindow = (typeof BUDGET_WINDOWS)[number];

/** One owner's limits, as configured: metric → window → limit (sandboxSeconds in seconds). */
export type BudgetLimits = Partial<Record<BudgetMetric, Partial<Record<BudgetWindow, number>>>>;

/** What one call used, charged when it ends. */
export interface CallUsage {
  calls: number;
  sandboxMs: number;
  upstreamCalls: number;
  egressBytes: number;
}

/** One metric in one window: `used` of `limit` (seconds for sandboxSeconds), until `resetsAt`. */
export interface BudgetWindowUse {
  used: number;
  limit: number;
  window: BudgetWindow;
  /** Epoch ms of the window's end (the next UTC midnight, or the first of next month). */
  resetsAt: number;
}

/**
 * A caller's use per metric: its tightest window (the most used of its limit) at the top — what
 * Cedar policies read as `context.budget.<metric>.used` / `.limit` — and every window.
 */
export type BudgetUse = Partial<
  Record<BudgetMetric, BudgetWindowUse & { windows: BudgetWindowUse[] }>
>;

/** An exhausted window, and whose budget it is. */
export interface BudgetExhausted extends BudgetWindowUse {
  metric: BudgetMetric;
  scope: 'client' | 'user';
}

/** The hash field each metric is counted in (sandbox time in ms: charges stay integers). */
const FIELD: Record<BudgetMetric, keyof CallUsage> = {
  calls: 'calls',
  sandboxSeconds: 'sandboxMs',
  upstreamCalls: 'upstreamCalls',
  egressBytes: 'egressBytes',
};
/** How long a window's counts outlive its end: a read at the edge still finds them. */
const KEEP_AFTER_MS = 3_600_000;

/** The window holding `now`: its name in key names (`d20261205`, `m202612`) and its end. */
export function budgetWindow(
  window: BudgetWindow,
  now: number,
): { period: string; resetsAt: number } {
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  const mm = String(m + 1).padStart(2, '0');
  if (window === 'month') return { period: `m${y}${mm}`, resetsAt: Date.UTC(y, m + 1, 1) };
  const dd = String(d.getUTCDate()).padStart(2, '0');
  return { period: `d${y}${mm}${dd}`, resetsAt: Date.UTC(y, m, d.getUTCDate() + 1) };
}

/** The windows a budget names, each once. */
function windowsOf(limits: BudgetLimits): BudgetWindow[] {
  return BUDGET_WINDOWS.filter((w) => BUDGET_METRICS.some((m) => limits[m]?.[w] !== undefined));
}

/** Charges for RELEASE: one hash per owner and window, its fields, its expiry (see CallQueue). */
export interface BudgetCharges {
  keys: string[];
  /** Per key: expire-at ms, field count, then field and amount pairs. */
  args: (string | number)[];
}

/** Where each principal's budget comes from: the configured clients. */
export interface BudgetConfig {
  client(clientId: string): BudgetLimits | undefined;
  /** `limits.perUser.budget` of the client: each user's own. */
  user(clientId: string): BudgetLimits | undefined;
}

/** A budget config from the configured clients (`clients[].limits`). */
export function budgetConfig(
  clients: readonly {
    id: string;
    limits: { budget?: BudgetLimits; perUser?: { budget?: BudgetLimits } };
  }[],
): BudgetConfig {
  const own = new Map<string, BudgetLimits>();
  const perUser = new Map<string, BudgetLimits>();
  for (const c of clients) {
    if (c.limits.budget && windowsOf(c.limits.budget).length > 0) own.set(c.id, c.limits.budget);
    const u = c.limits.perUser?.budget;
    if (u && windowsOf(u).length > 0) perUser.set(c.id, u);
  }
  return { client: (id) => own.get(id), user: (id) => perUser.get(id) };
}

export class Budgets {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly config: BudgetConfig,
  ) {}

  /** Whether this caller has any budget: without one, no command is sent for it. */
  has(clientId: string, user?: string): boolean {
    return (
      this.config.client(clientId) !== undefined ||
      (user !== undefined && this.config.user(clientId) !== undefined)
    );
  }

  /** The owners whose budgets a call of this caller spends: the client's, and its user's. */
  private owners(
    clientId: string,
    user: string | undefined,
  ): { scope: 'client' | 'user'; limits: BudgetLimits; key: (period: string) => string }[] {
    const owners = [];
    const own = this.config.client(clientId);
    if (own) {
      owners.push({
        scope: 'client' as const,
        limits: own,
        key: (p: string) => this.keys.budget(clientId, p),
      });
    }
    const perUser = user === undefined ? undefined : this.config.user(clientId);
    if (perUser && user !== undefined) {
      owners.push({
        scope: 'user' as const,
        limits: perUser,
        key: (p: string) => this.keys.userBudget(clientId, p, user),
      });
    }
    return owners;
  }

  /**
   * The client's and (with a user) the user's use against their limits, in one round trip
   * (one HMGET per owner and window); each undefined when it has no budget.
   */
  async use(
    clientId: string,
    user?: string,
    now = Date.now(),
  ): Promise<{ client?: BudgetUse; user?: BudgetUse }> {
    const owners = this.owners(clientId, user);
    if (owners.length === 0) return {};
    const reads = owners.flatMap((o) =>
      windowsOf(o.limits).map((w) => ({ owner: o, window: w, ...budgetWindow(w, now) })),
    );
    const pipeline = this.redis.pipeline();
    const fields = BUDGET_METRICS.map((m) => FIELD[m]);
    for (const r of reads) pipeline.hmget(r.owner.key(r.period), ...fields);
    const results = (await pipeline.exec()) ?? [];
    const out: { client?: BudgetUse; user?: BudgetUse } = {};
    reads.forEach((r, i) => {
      const [err, values] = results[i] ?? [];
      if (err) throw err;
      const use = (out[r.owner.scope] ??= {});
      BUDGET_METRICS.forEach((metric, j) => {
        const limit = r.owner.limits[metric]?.[r.window];
        if (limit === undefined) return;
        const raw = Number((values as (string | null)[])[j] ?? 0);
        // Sandbox time is kept in ms and shown in whole seconds, rounded up (Cedar has no floats).
        const used = metric === 'sandboxSeconds' ? Math.ceil(raw / 1000) : raw;
        const entry: BudgetWindowUse = { used, limit, window: r.window, resetsAt: r.resetsAt };
        const seen = use[metric];
        if (!seen) use[metric] = { ...entry, windows: [entry] };
        else {
          seen.windows.push(entry);
          if (fraction(entry) > fraction(seen)) Object.assign(seen, entry);
        }
      });
    });
    return out;
  }

  /**
   * What a policy sees of a caller's budget (`context.budget`): per metric the tightest window of
   * the client's and the user's budgets together. Empty without a budget (no command sent).
   */
  async budgetUse(clientId: string, user?: string): Promise<BudgetUse> {
    const { client, user: own } = await this.use(clientId, user);
    const merged: BudgetUse = {};
    for (const use of [client, own]) {
      for (const metric of BUDGET_METRICS) {
        const m = use?.[metric];
        if (!m) continue;
        const seen = merged[metric];
        if (!seen) merged[metric] = { ...m, windows: [...m.windows] };
        else {
          seen.windows.push(...m.windows);
          if (fraction(m) > fraction(seen)) Object.assign(seen, pick(m));
        }
      }
    }
    return merged;
  }

  /**
   * What RELEASE adds for a call that used `usage`: the metrics its owners' budgets name, in the
   * windows they name. Undefined when it has no budget (RELEASE then runs as before).
   */
  charges(
    call: { clientId: string; user?: string },
    usage: CallUsage,
    now = Date.now(),
  ): BudgetCharges | undefined {
    const owners = this.owners(call.clientId, call.user);
    if (owners.length === 0) return undefined;
    const charges: BudgetCharges = { keys: [], args: [] };
    for (const o of owners) {
      for (const w of windowsOf(o.limits)) {
        const pairs = BUDGET_METRICS.filter(
          (m) => o.limits[m]?.[w] !== undefined && usage[FIELD[m]] > 0,
        ).flatMap((m) => [FIELD[m], Math.round(usage[FIELD[m]])]);
        if (pairs.length === 0) continue;
        const { period, resetsAt } = budgetWindow(w, now);
        charges.keys.push(o.key(period));
        charges.args.push(resetsAt + KEEP_AFTER_MS, pairs.length / 2, ...pairs);
      }
    }
    return charges.keys.length > 0 ? charges : undefined;
  }
}

function fraction(u: BudgetWindowUse): number {
  return u.limit === 0 ? Infinity : u.used / u.limit;
}

function pick(u: BudgetWindowUse): BudgetWindowUse {
  return { used: u.used, limit: u.limit, window: u.window, resetsAt: u.resetsAt };
}

/**
 * The first window a call of a tool that spends `metrics` finds spent (used ≥ limit): the one
 * that resets last, since the call waits for all of them.
 */
export function exhaustedBudget(
  use: { client?: BudgetUse; user?: BudgetUse },
  metrics: readonly BudgetMetric[],
): BudgetExhausted | undefined {
  let found: BudgetExhausted | undefined;
  for (const scope of ['client', 'user'] as const) {
    for (const metric of metrics) {
      for (const w of use[scope]?.[metric]?.windows ?? []) {
        if (w.used < w.limit) continue;
        if (!found || w.resetsAt > found.resetsAt) found = { ...w, metric, scope };
      }
    }
  }
  return found;
}

/**
 * The tightest remaining of a caller's budgets, for the `Toolgate-Budget-Remaining` header
 * (`calls=12;window=day;scope=client`): per metric the window with the least left (a call
 * spends the same against each), then of those the one with the least left as a share of its
 * limit (metrics have different units).
 */
export function budgetRemaining(use: { client?: BudgetUse; user?: BudgetUse }): string | undefined {
  let best: { text: string; share: number } | undefined;
  for (const metric of BUDGET_METRICS) {
    let least: { left: number; share: number; text: string } | undefined;
    for (const scope of ['client', 'user'] as const) {
      for (const w of use[scope]?.[metric]?.windows ?? []) {
        const left = Math.max(0, w.limit - w.used);
        if (least && left >= least.left) continue;
        const share = w.limit === 0 ? 0 : left / w.limit;
        least = { left, share, text: `${metric}=${left};window=${w.window};scope=${scope}` };
      }
    }
    if (least && (!best || least.share < best.share)) best = least;
  }
  return best?.text;
}
