import { randomUUID } from 'node:crypto';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { SpanKind, startTelemetry } from '@toolgate/telemetry';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startService, type Service } from './support/process.js';
import type { Stack } from './support/stack.js';
import { executeSpan } from './support/spans.js';

const exporter = new InMemorySpanExporter();
const telemetry = startTelemetry({
  serviceName: 'toolgate-test',
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
});

let stack: Stack;
beforeAll(async () => {
  // Loaded after the SDK starts, as the services' --import preload does.
  const { startStack } = await import('./support/stack.js');
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
  await telemetry.shutdown();
});

describe('tracing', () => {
  it('one call is one trace: the gateway span and the worker span share the trace id', async () => {
    const res = await stack.call('/tools/calculator/execute', { json: { expression: '6*7' } });
    const { id } = await res.json();
    const execute = await executeSpan(exporter, id);
    const spans = exporter.getFinishedSpans();
    const traceId = execute.spanContext().traceId;
    const call = spans.find(
      (s) => s.name === 'toolgate.call' && s.spanContext().traceId === traceId,
    );
    expect(call, 'gateway span in the same trace').toBeDefined();
    expect(execute.parentSpanContext?.spanId).toBe(call!.spanContext().spanId);
    expect(call!.attributes).toMatchObject({
      'toolgate.tool': 'calculator',
      'toolgate.client': 'alice',
      'toolgate.status': 'ok',
    });
    expect(execute.attributes).toMatchObject({
      'toolgate.status': 'ok',
      'toolgate.queue': 'fast',
    });
    // BullMQ's own spans (bullmq-otel) join the same trace: the job's add (producer) under
    // the gateway's span, its processing (consumer) under the add.
    const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
    const add = inTrace.find((s) => s.kind === SpanKind.PRODUCER && s.name.includes('fast'));
    const processed = inTrace.find((s) => s.kind === SpanKind.CONSUMER && s.name.includes('fast'));
    expect(
      add,
      `BullMQ's producer span in the trace: ${inTrace.map((s) => s.name).join(', ')}`,
    ).toBeDefined();
    expect(processed, "BullMQ's consumer span in the trace").toBeDefined();
    expect(add!.attributes['bullmq.job.id']).toBe(id);
    expect(processed!.parentSpanContext?.spanId).toBe(add!.spanContext().spanId);
    // One trace per call: no other call's spans in it, and no BullMQ span of this call outside it.
    const elsewhere = spans.filter(
      (s) => s.attributes['bullmq.job.id'] === id && s.spanContext().traceId !== traceId,
    );
    expect(elsewhere.map((s) => s.name)).toEqual([]);
  });
});

describe('tracing in the real processes', () => {
  const started: Service[] = [];
  afterAll(() => {
    for (const s of started) s.child.kill('SIGKILL');
  });

  it('the HTTP server span, the gateway span and the worker span share one trace', async () => {
    const env = {
      REDIS_URL: inject('redisUrl'),
      TOOLGATE_REDIS_PREFIX: `o${randomUUID().slice(0, 8)}`,
      PORT: '0',
      WORKER_METRICS_PORT: '0',
      TOOLGATE_WORKER_QUEUES: 'fast',
      OTEL_TRACES_EXPORTER: 'console',
      OTEL_BSP_SCHEDULE_DELAY: '100',
    };
    const worker = startService('worker', { ...env, OTEL_SERVICE_NAME: 'toolgate-worker' });
    const gateway = startService('gateway', { ...env, OTEL_SERVICE_NAME: 'toolgate-gateway' });
    started.push(worker, gateway);
    await worker.waitFor(/worker started/);
    const [, base] = await gateway.waitFor(/Point your assistant at: (http:\/\/127\.0\.0\.1:\d+)/);
    const [, key] = await gateway.waitFor(/Development admin key: +(tg_dev_\S+)/);
    const res = await fetch(`${base}/tools/calculator/execute`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: '{"expression":"1+1"}',
    });
    expect(res.status).toBe(200);
    // ConsoleSpanExporter prints one object per span; a span's own trace id is the
    // two-space-indented `traceId` (parentSpanContext's is nested deeper). Never match across spans.
    const span = (name: string, traceId = '[0-9a-f]{32}') =>
      new RegExp(
        `\\n  traceId: '(${traceId})',(?:(?!\\n  traceId: )[\\s\\S])*?\\n  name: '${name}`,
      );
    const [, traceId] = await worker.waitFor(span('toolgate\\.execute'));
    // The gateway exports the HTTP server span (http instrumentation) and its own, same trace.
    await gateway.waitFor(span('toolgate\\.call', traceId));
    await gateway.waitFor(span('POST', traceId));
  }, 60_000);
});
