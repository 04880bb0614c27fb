import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The gateway's own Prometheus registry. */
export function createMetrics() {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'gateway' });
  collectDefaultMetrics({ register: registry, prefix: 'toolgate_gateway_' });
  const httpRequests = new Counter({
    name: 'toolgate_http_requests_total',
    help: 'HTTP requests by route and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const calls = new Counter({
    name: 'toolgate_calls_total',
    help: 'Tool calls answered by the gateway, by tool, client and final status',
    labelNames: ['tool', 'client', 'status'] as const,
    registers: [registry],
  });
  const callDuration = new Histogram({
    name: 'toolgate_call_duration_seconds',
    help: 'Time from request to answer for synchronous tool calls',
    labelNames: ['tool'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  return { registry, httpRequests, calls, callDuration };
}

export type GatewayMetrics = ReturnType<typeof createMetrics>;
