import { createServer, type Server } from 'node:http';
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import { Worker, type Job } from 'bullmq';
import {
  AuditLog,
  Heartbeat,
  Keys,
  ResultCache,
  Stats,
  createRedis,
  waitReady,
  type CallJob,
  type CallOutcome,
  type QueueKind,
} from '@toolgate/calls';
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ToolRegistry, ToolServices } from '@toolgate/registry';
import { SpanKind, withSpan } from '@toolgate/telemetry';
import { createMetrics, type WorkerMetrics } from './metrics.js';
import { Recorder } from './recorder.js';
import { runTool } from './run-tool.js';

export interface WorkerOptions {
  config: Config;
  registry: ToolRegistry;
  logger: Logger;
  services: ToolServices;
  /** Which queues this process consumes (default both). */
  queues?: QueueKind[];
  /** Share a metrics registry made earlier (main.ts makes it to hook the sandbox in). */
  metrics?: WorkerMetrics;
}

export interface ToolWorker {
  id: string;
  start(): Promise<void>;
  /** Metrics/health HTTP server on `worker.metricsPort` (0 = none). Returns the bound port. */
  serveMetrics(port?: number): Promise<number | undefined>;
  /** Stops taking jobs, finishes in-flight calls, then disconnects. */
  close(): Promise<void>;
}

/** Consumes tool calls from BullMQ and runs them; stateless, any number per Redis. */
export function createWorker({
  config,
  registry,
  logger,
  services,
  queues = ['fast', 'sandbox'],
  metrics = createMetrics(),
}: WorkerOptions): ToolWorker {
  const id = `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const log = logger.child({ component: 'worker', workerId: id });
  const keys = new Keys(config.redis.prefix);
  const redis = createRedis(config.redis.url, 'blocking');
  redis.on('error', (err) => log.debug({ err: err.message }, 'redis error'));
  const audit = new AuditLog(redis, keys, config.audit);
  const stats = new Stats(redis, keys);
  const cache = new ResultCache(redis, keys);
  const heartbeat = new Heartbeat(redis, keys, id);
  const shutdown = new AbortController();
  const workers: Worker[] = [];
  const recorder = new Recorder({
    redis,
    keys,
    registry,
    audit,
    stats,
    metrics,
    log,
    ttlSeconds: config.calls.ttlSeconds,
  });
  let metricsServer: Server | undefined;

  function processCall(job: Job<CallJob>, kind: QueueKind): Promise<CallOutcome> {
    const call = job.data;
    return withSpan(
      'toolgate.execute',
      {
        kind: SpanKind.CONSUMER,
        ...(call.trace ? { parent: call.trace } : {}),
        attributes: {
          'toolgate.tool': call.tool,
          'toolgate.client': call.clientId,
          'toolgate.call_id': call.id,
          'toolgate.queue': kind,
        },
      },
      async (span) => {
        const outcome = await execute(job, kind);
        span.setAttribute('toolgate.status', outcome.status);
        if (outcome.error) span.setAttribute('toolgate.error_code', outcome.error.code);
        return outcome;
      },
    );
  }

  async function execute(job: Job<CallJob>, kind: QueueKind): Promise<CallOutcome> {
    const call = job.data;
    const tool = registry.get(call.tool);
    let outcome: CallOutcome;
    metrics.inFlight.inc({ queue: kind });
    try {
      if (!tool) {
        outcome = errorOutcome(
          call,
          'unknown_tool',
          `this worker has no tool named "${call.tool}"`,
        );
      } else if (job.attemptsStarted > 1 && !tool.idempotent) {
        // A worker died while running this call; running a non-idempotent tool twice could repeat its effects.
        outcome = errorOutcome(
          call,
          'worker_lost',
          `the worker running ${call.tool} stopped mid-call; it was not run again because the tool is not idempotent`,
        );
      } else {
        outcome = await runTool(tool, call, services, shutdown.signal);
        // Cached before anyone hears of the result, so an identical call right after it hits.
        if (tool.cacheTtlSeconds > 0 && outcome.status === 'ok') {
          const write = redis.multi();
          cache.addTo(write, tool, call.args, call.clientId, outcome.result);
          await write
            .exec()
            .catch((err: unknown) =>
              log.warn({ err, callId: call.id }, 'could not cache the result'),
            );
        }
      }
      // The outcome travels back with the job's completion; the record, audit entry and stats
      // are written in batches alongside. Completed jobs stay readable for a few seconds, so
      // GET /v1/calls never misses the gap.
      recorder.add({ call, kind, outcome });
      // The waiting gateway gets the outcome now; the job's completion event follows anyway.
      if (call.replyTo) redis.publish(call.replyTo, JSON.stringify(outcome)).catch(() => undefined);
      metrics.executions.inc({ tool: call.tool, client: call.clientId, status: outcome.status });
      metrics.executionDuration.observe({ tool: call.tool }, outcome.durationMs / 1000);
      log.debug(
        { callId: call.id, tool: call.tool, status: outcome.status, ms: outcome.durationMs },
        'call finished',
      );
      return outcome;
    } finally {
      metrics.inFlight.dec({ queue: kind });
    }
  }

  return {
    id,
    async start() {
      await waitReady(redis);
      for (const kind of queues) {
        const worker = new Worker<CallJob, CallOutcome>(
          keys.queue(kind),
          (job) => processCall(job, kind),
          {
            connection: createRedis(config.redis.url, 'blocking'),
            prefix: keys.bullPrefix,
            concurrency:
              kind === 'fast' ? config.worker.concurrency : config.worker.sandboxConcurrency,
            // A stalled job (its worker died) is handed out once more, where `process` decides.
            maxStalledCount: 1,
          },
        );
        worker.on('error', (err) => log.warn({ err: err.message, queue: kind }, 'queue error'));
        worker.on('failed', (job, err) =>
          log.error({ callId: job?.id, err: err.message }, 'job failed outside the tool'),
        );
        workers.push(worker);
      }
      await Promise.all(workers.map((w) => w.waitUntilReady()));
      await heartbeat.start();
      log.info(
        {
          queues,
          concurrency: config.worker.concurrency,
          sandboxConcurrency: config.worker.sandboxConcurrency,
          tools: registry.size,
        },
        'worker started',
      );
    },
    async serveMetrics(port?: number) {
      // An explicit 0 binds any free port; the configured 0 means "no metrics server".
      if (port === undefined && config.worker.metricsPort === 0) return undefined;
      const listenPort = port ?? config.worker.metricsPort;
      metricsServer = createServer((req, res) => {
        if (req.url === '/metrics') {
          metrics.registry.metrics().then(
            (text) =>
              res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
            () => res.writeHead(500).end(),
          );
        } else if (req.url === '/healthz') {
          res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify({ status: 'ok', workerId: id }));
        } else {
          res.writeHead(404).end();
        }
      });
      await new Promise<void>((resolve) => metricsServer!.listen(listenPort, resolve));
      const address = metricsServer.address();
      return typeof address === 'object' && address ? address.port : listenPort;
    },
    async close() {
      log.info('worker stopping: finishing in-flight calls');
      // BullMQ's close waits for the jobs in progress; tools see shutdown only if they outlive it.
      await Promise.all(workers.map((w) => w.close()));
      await recorder.drain();
      shutdown.abort();
      await heartbeat.stop();
      metricsServer?.close();
      redis.disconnect();
      log.info('worker stopped');
    },
  };
}

function errorOutcome(call: CallJob, code: string, message: string): CallOutcome {
  return {
    id: call.id,
    tool: call.tool,
    status: 'error',
    error: { code, message },
    durationMs: 0,
    cached: false,
  };
}
