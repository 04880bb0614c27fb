import type { BudgetUse, BudgetWindowUse } from '@toolgate/calls';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Sources read at scrape time (queue depth, pending approvals, cache size). */
export interface ScrapeSources {
  queueDepth(): Promise<
    Record<string, { waiting: number; active: number; delayed: number; failed: number }>
  >;
  approvalsPending(): Promise<number>;
  cacheKeys(): Promise<number>;
  workersAlive(): Promise<number>;
  redisUp(): boolean;
  /** With `redis.shards`: each shard and whether this gateway is connected to it. */
  shardsUp?(): { shard: string; up: boolean }[];
  /** Each client with a `limits.budget` and its use (docs/budgets.md). */
  budgets?(): Promise<{ client: string; use: BudgetUse }[]>;
  /** The active Cedar policy set's hash, with `policy.cedar` (docs/policy.md). */
  policyHash?(): string | undefined;
}

/** Prometheus label of each budget metric (snake case, as the metric names). */
const METRIC_LABEL: Record<string, string> = {
  calls: 'calls',
  sandboxSeconds: 'sandbox_seconds',
  upstreamCalls: 'upstream_calls',
  egressBytes: 'egress_bytes',
};

/** The gateway's own Prometheus registry (docs/spec.md §7). Metric names are a contract with deploy/. */
export function createMetrics() {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'gateway' });
  collectDefaultMetrics({ register: registry });
  let sources: ScrapeSources | undefined;
  const httpRequests = new Counter({
    name: 'toolgate_http_requests_total',
    help: 'HTTP requests by route and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const calls = new Counter({
    name: 'toolgate_calls_total',
    help: 'Tool calls answered by the gateway, by tool, client and status (ok, error, queued, pending_approval, or the refusal code)',
    labelNames: ['tool', 'client', 'status'] as const,
    registers: [registry],
  });
  const callDuration = new Histogram({
    name: 'toolgate_call_duration_seconds',
    help: 'Time from request to answer for synchronous tool calls',
    labelNames: ['tool'] as const,
    buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const limited = new Counter({
    name: 'toolgate_limited_total',
    help: 'Requests refused by the rate limit (kind=rate), the loop guard (kind=loop), the limit on calls in flight (kind=in_flight), the limit on calls pending approval (kind=pending_approvals) or the per-address limit on bad keys (kind=auth), by client',
    labelNames: ['kind', 'client'] as const,
    registers: [registry],
  });
  const approvalsParked = new Counter({
    name: 'toolgate_approvals_requested_total',
    help: 'Calls parked for human approval, by tool',
    labelNames: ['tool'] as const,
    registers: [registry],
  });
  const approvalDecisions = new Counter({
    name: 'toolgate_approval_decisions_total',
    help: 'Approval decisions by outcome (approved, rejected, expired)',
    labelNames: ['decision'] as const,
    registers: [registry],
  });
  const cache = new Counter({
    name: 'toolgate_cache_lookups_total',
    help: 'Result-cache lookups answered by the gateway, by tool and result (hit)',
    labelNames: ['tool', 'result'] as const,
    registers: [registry],
  });
  const cacheEvictions = new Counter({
    name: 'toolgate_cache_evictions_total',
    help: 'Cache entries that expired',
    registers: [registry],
  });
  new Gauge({
    name: 'toolgate_queue_jobs',
    help: 'Jobs in each queue by state (waiting, active, delayed, failed)',
    labelNames: ['queue', 'state'] as const,
    registers: [registry],
    async collect() {
      if (!sources) return;
      const depth = await sources.queueDepth().catch(() => ({}));
      for (const [queue, counts] of Object.entries(depth)) {
        for (const [state, n] of Object.entries(counts)) this.set({ queue, state }, n);
      }
    },
  });
  new Gauge({
    name: 'toolgate_approvals_pending',
    help: 'Calls waiting for an admin decision',
    registers: [registry],
    async collect() {
      if (sources) this.set(await sources.approvalsPending().catch(() => 0));
    },
  });
  new Gauge({
    name: 'toolgate_cache_keys',
    help: 'Live entries in the result cache',
    registers: [registry],
    async collect() {
      if (sources) this.set(await sources.cacheKeys().catch(() => 0));
    },
  });
  new Gauge({
    name: 'toolgate_workers_alive',
    help: 'Workers whose heartbeat is fresh',
    registers: [registry],
    async collect() {
      if (sources) this.set(await sources.workersAlive().catch(() => 0));
    },
  });
  // Clients with a budget only (a config-bounded label set); per-user budgets are not labelled.
  // Both gauges share one read of Redis per scrape (the registry collects them together).
  let budgetRead:
    { at: number; use: ReturnType<NonNullable<ScrapeSources['budgets']>> } | undefined;
  const budgets = () => {
    if (!sources?.budgets) return Promise.resolve(undefined);
    if (!budgetRead || Date.now() - budgetRead.at > 1000)
      budgetRead = { at: Date.now(), use: sources.budgets() };
    return budgetRead.use.catch(() => undefined);
  };
  const budgetGauge = (name: string, help: string, value: (w: BudgetWindowUse) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['client', 'metric', 'window'] as const,
      registers: [registry],
      async collect() {
        const all = await budgets();
        if (!all) return;
        this.reset();
        for (const { client, use } of all) {
          for (const [metric, m] of Object.entries(use)) {
            for (const w of m.windows) {
              this.set(
                { client, metric: METRIC_LABEL[metric] ?? metric, window: w.window },
                value(w),
              );
            }
          }
        }
      },
    });
  budgetGauge(
    'toolgate_budget_used',
    'What a client spent of its budget in the current UTC window, by metric and window (toolgate_budget_limit is its limit)',
    (w) => w.used,
  );
  budgetGauge(
    'toolgate_budget_limit',
    "A client's spend budget per metric (calls, sandbox_seconds, upstream_calls, egress_bytes) and UTC window (day, month)",
    (w) => w.limit,
  );
  const unreplicated = new Counter({
    name: 'toolgate_redis_unreplicated_total',
    help: 'Calls accepted although Redis WAIT timed out before redis.durability.replicas replicas held them (docs/redis-ha.md)',
    registers: [registry],
  });
  new Gauge({
    name: 'toolgate_redis_up',
    help: '1 while the gateway is connected to Redis (with redis.shards: to every shard), else 0',
    registers: [registry],
    collect() {
      this.set(sources?.redisUp() ? 1 : 0);
    },
  });
  new Gauge({
    name: 'toolgate_redis_shard_up',
    help: 'With redis.shards: 1 while the gateway is connected to the shard, else 0 (docs/sharding.md)',
    labelNames: ['shard'],
    registers: [registry],
    collect() {
      this.reset();
      for (const { shard, up } of sources?.shardsUp?.() ?? []) this.set({ shard }, up ? 1 : 0);
    },
  });
  const policyDecisions = new Counter({
    name: 'toolgate_policy_decisions_total',
    help: 'Cedar decisions by action (call, approve) and decision (allow, deny, approval)',
    labelNames: ['action', 'decision'] as const,
    registers: [registry],
  });
  const policyErrors = new Counter({
    name: 'toolgate_policy_evaluation_errors_total',
    help: 'Cedar policies that failed to evaluate in a decision (skipped; a failing forbid denies), by policy id',
    labelNames: ['policy'] as const,
    registers: [registry],
  });
  const policyReloadFailures = new Counter({
    name: 'toolgate_policy_reload_failures_total',
    help: 'Reloads of the Cedar policy files refused (they did not parse or validate): the last good set keeps deciding',
    registers: [registry],
  });
  new Gauge({
    name: 'toolgate_policy_set_info',
    help: 'The active Cedar policy set (1, labelled with its hash): gateways of one deployment should show the same',
    labelNames: ['hash'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const hash = sources?.policyHash?.();
      if (hash !== undefined) this.set({ hash }, 1);
    },
  });
  return {
    registry,
    policyDecisions,
    policyErrors,
    policyReloadFailures,
    httpRequests,
    calls,
    callDuration,
    limited,
    approvalsParked,
    approvalDecisions,
    cache,
    cacheEvictions,
    unreplicated,
    setSources(s: ScrapeSources) {
      sources = s;
    },
  };
}

export type GatewayMetrics = ReturnType<typeof createMetrics>;
