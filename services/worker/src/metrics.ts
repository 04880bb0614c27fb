import type { SandboxHooks } from '@toolgate/sandbox';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The worker's own Prometheus registry. */
export function createMetrics() {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'worker' });
  collectDefaultMetrics({ register: registry });
  const executions = new Counter({
    name: 'toolgate_tool_executions_total',
    help: 'Tool executions by tool, client and outcome status',
    labelNames: ['tool', 'client', 'status'] as const,
    registers: [registry],
  });
  const executionDuration = new Histogram({
    name: 'toolgate_tool_execution_seconds',
    help: 'Time spent running tool handlers',
    labelNames: ['tool'] as const,
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const inFlight = new Gauge({
    name: 'toolgate_worker_in_flight',
    help: 'Tool calls running in this worker, by queue',
    labelNames: ['queue'] as const,
    registers: [registry],
  });
  const deferred = new Counter({
    name: 'toolgate_fair_deferrals_total',
    help: 'Calls put back in the queue because their client already ran its limits.sandboxInFlight calls, by queue and client',
    labelNames: ['queue', 'client'] as const,
    registers: [registry],
  });
  const shardUp = new Gauge({
    name: 'toolgate_worker_shard_up',
    help: 'Whether the worker serves a Redis shard (1) or waits for its Redis, at start or in an outage (0), by shard (docs/sharding.md)',
    labelNames: ['shard'] as const,
    registers: [registry],
  });
  const unreplicated = new Counter({
    name: 'toolgate_redis_unreplicated_total',
    help: 'Non-idempotent calls that went on although Redis WAIT timed out before redis.durability.replicas replicas held their start (step=start) or outcome (step=outcome) (docs/redis-ha.md)',
    labelNames: ['step'] as const,
    registers: [registry],
  });
  const cacheLookups = new Counter({
    name: 'toolgate_cache_lookups_total',
    help: 'Result-cache lookups; the worker counts misses (calls of cacheable tools it had to run)',
    labelNames: ['tool', 'result'] as const,
    registers: [registry],
  });
  const sandboxStart = new Histogram({
    name: 'toolgate_sandbox_start_seconds',
    help: 'Time to create and start a sandbox container (off the call path when it goes to the warm pool)',
    labelNames: ['image', 'driver'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
    registers: [registry],
  });
  const sandboxRun = new Histogram({
    name: 'toolgate_sandbox_run_seconds',
    help: 'Time of one sandboxed run, by image, driver and whether a warm container served it',
    labelNames: ['image', 'driver', 'warm'] as const,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const sandboxPhases = new Histogram({
    name: 'toolgate_sandbox_phase_seconds',
    help: 'Where a docker sandbox run goes: checkout (from the warm pool), mount (the workspace), exec (call written to exit reported), collect (the rest of the output)',
    labelNames: ['image', 'phase'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30],
    registers: [registry],
  });
  const sandboxOutcomes = new Counter({
    name: 'toolgate_sandbox_runs_total',
    help: 'Sandboxed runs by image and result (ok, nonzero_exit, timeout, oom, output_limit)',
    labelNames: ['image', 'result'] as const,
    registers: [registry],
  });
  const resultMismatches = new Counter({
    name: 'toolgate_tool_result_mismatches_total',
    help: "Results that did not match their tool's declared result schema (returned anyway), by tool",
    labelNames: ['tool'] as const,
    registers: [registry],
  });
  let warmSource: (() => Record<string, number>) | undefined;
  new Gauge({
    name: 'toolgate_sandbox_warm_containers',
    help: 'Pre-started sandbox containers waiting for a call, by image',
    labelNames: ['image'] as const,
    registers: [registry],
    collect() {
      for (const [image, n] of Object.entries(warmSource?.() ?? {})) this.set({ image }, n);
    },
  });
  return {
    registry,
    executions,
    executionDuration,
    inFlight,
    deferred,
    unreplicated,
    shardUp,
    cacheLookups,
    sandboxStart,
    sandboxRun,
    sandboxOutcomes,
    resultMismatches,
    setWarmSource(fn: () => Record<string, number>) {
      warmSource = fn;
    },
    /** Warm sandboxes held now, all images (the heartbeat reports it for the console). */
    warmTotal(): number {
      return Object.values(warmSource?.() ?? {}).reduce((a, b) => a + b, 0);
    },
    /** Hooks for the sandbox driver: every container start and every run. */
    sandboxHooks(): SandboxHooks {
      return {
        onStart: ({ image, driver, durationMs }) =>
          sandboxStart.observe({ image, driver }, durationMs / 1000),
        onRun: ({ image, driver, warm, durationMs, result, phases }) => {
          sandboxRun.observe({ image, driver, warm: String(warm) }, durationMs / 1000);
          if (phases) {
            sandboxPhases.observe({ image, phase: 'checkout' }, phases.checkoutMs / 1000);
            sandboxPhases.observe({ image, phase: 'mount' }, phases.mountMs / 1000);
            sandboxPhases.observe({ image, phase: 'exec' }, phases.execMs / 1000);
            sandboxPhases.observe({ image, phase: 'collect' }, phases.collectMs / 1000);
          }
          const outcome = result.timedOut
            ? 'timeout'
            : result.oomKilled
              ? 'oom'
              : result.outputLimited
                ? 'output_limit'
                : result.exitCode === 0
                  ? 'ok'
                  : 'nonzero_exit';
          sandboxOutcomes.inc({ image, result: outcome });
        },
      };
    },
  };
}

export type WorkerMetrics = ReturnType<typeof createMetrics>;
