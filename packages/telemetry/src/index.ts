import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  propagation,
  trace,
  type Attributes,
  type Span,
} from '@opentelemetry/api';
import { ExpressInstrumentation } from '@opentelemetry/instrumentation-express';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { NodeSDK } from '@opentelemetry/sdk-node';
import type { SpanProcessor } from '@opentelemetry/sdk-trace';

export { SpanKind };

type Env = Record<string, string | undefined>;

export interface TelemetryOptions {
  serviceName: string;
  env?: Env;
  /** Tests pass their own (e.g. an in-memory exporter); otherwise OTLP from OTEL_* vars. */
  spanProcessors?: SpanProcessor[];
}

export interface Telemetry {
  enabled: boolean;
  shutdown(): Promise<void>;
}

/** Tracing is on when an OTLP endpoint (or another exporter) is configured through OTEL_* vars. */
export function telemetryWanted(env: Env): boolean {
  if (env.OTEL_SDK_DISABLED === 'true') return false;
  const exporter = env.OTEL_TRACES_EXPORTER;
  if (exporter === 'none') return false;
  return Boolean(
    exporter || env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
  );
}

/**
 * Starts the OpenTelemetry SDK with HTTP, express and ioredis instrumentation, exporting by
 * the standard OTEL_* variables. Off (a no-op) when nothing is configured.
 */
let active: Telemetry | undefined;

export function startTelemetry(options: TelemetryOptions): Telemetry {
  const env = options.env ?? process.env;
  if (active) return active;
  if (!options.spanProcessors && !telemetryWanted(env)) {
    return { enabled: false, shutdown: async () => undefined };
  }
  const sdk = new NodeSDK({
    serviceName: env.OTEL_SERVICE_NAME ?? options.serviceName,
    ...(options.spanProcessors ? { spanProcessors: options.spanProcessors } : {}),
    instrumentations: [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (req) => req.url === '/metrics' || req.url === '/healthz',
      }),
      new ExpressInstrumentation(),
      new IORedisInstrumentation(),
    ],
  });
  sdk.start();
  active = {
    enabled: true,
    shutdown: async () => {
      active = undefined;
      await sdk.shutdown();
    },
  };
  return active;
}

/** Whether tracing is on in this process (BullMQ's telemetry is set up only then). */
export function tracingActive(): boolean {
  return active !== undefined;
}

/** Flushes and stops tracing if it was started (services call this before exiting). */
export async function shutdownTelemetry(): Promise<void> {
  await active?.shutdown().catch(() => undefined);
}

export const tracer = trace.getTracer('toolgate');

/** The active trace context as W3C headers, to carry inside a queued job. */
export function injectContext(): Record<string, string> | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return Object.keys(carrier).length > 0 ? carrier : undefined;
}

/**
 * Runs `fn` in a span; with `parent` carriers (from a job) the span joins that trace.
 * Exceptions mark the span as failed and propagate.
 */
export async function withSpan<T>(
  name: string,
  options: { kind?: SpanKind; attributes?: Attributes; parent?: Record<string, string> },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = options.parent
    ? propagation.extract(ROOT_CONTEXT, options.parent)
    : context.active();
  return tracer.startActiveSpan(
    name,
    { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes ?? {} },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.recordException(err as Error);
        span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}
