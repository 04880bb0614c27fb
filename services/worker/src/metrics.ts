import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The worker's own Prometheus registry. */
export function createMetrics() {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'worker' });
  collectDefaultMetrics({ register: registry, prefix: 'toolgate_worker_' });
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
  return { registry, executions, executionDuration, inFlight };
}

export type WorkerMetrics = ReturnType<typeof createMetrics>;
