import {
  finishedRecord,
  publishOutcome,
  type AuditLog,
  type CallJob,
  type CallOutcome,
  type CallStore,
  type Keys,
  type OutcomeEvent,
  type QueueKind,
  type RedisClient,
  type Stats,
  StatsBatch,
} from '@toolgate/calls';
import type { Logger } from '@toolgate/log';
import type { ToolRegistry } from '@toolgate/registry';
import type { WorkerMetrics } from './metrics.js';

const MAX_DELAY_MS = 10;
const MAX_BATCH = 200;
/**
 * How long a batch that failed is tried again: a Sentinel or Cluster failover takes seconds,
 * and a record dropped then would leave an answered call `not_found` for good.
 */
const RETRY_FOR_MS = 60_000;
/**
 * How long a write for a caller waiting on it (`now`) is tried again: long enough for a Redis
 * Cluster to finish moving toolgate's slot (a transaction meanwhile gets ASK or TRYAGAIN).
 */
const NOW_RETRY_FOR_MS = 10_000;
/**
 * How long a sandbox call's stats and series wait for others to share their transaction.
 * Sandbox calls end a few to a few hundred a second, so a record batch of MAX_DELAY_MS holds
 * one or two of them, and their counters (~16 commands a batch: per tool and per client, the
 * minute's series) would cost each call nearly alone: over a second they are shared (issue 20).
 * The counters lag the calls by at most this; records and audit entries do not wait.
 */
const SANDBOX_STATS_DELAY_MS = 1000;

interface Finished {
  call: CallJob;
  kind: QueueKind;
  outcome: CallOutcome;
  /** The call's last event, to publish with the record (when the worker did not at once). */
  end?: OutcomeEvent;
  /** Its stats are in the sandbox calls' stats batch, not in the record's transaction. */
  statsApart?: boolean;
}

/**
 * Writes what a finished call leaves behind — its record, audit entry, stats — in batches:
 * one Redis transaction per MAX_DELAY_MS or MAX_BATCH calls (sandbox calls' stats in their own,
 * per SANDBOX_STATS_DELAY_MS). Off the caller's path (the waiting gateway has the outcome from
 * the worker's reply message), and a fraction of the commands and syscalls of one transaction
 * per call. The call's index entry is its queue's (FINISH adds it): a batch only keeps the
 * index trimmed.
 */
export class Recorder {
  private pending: Finished[] = [];
  private timer: NodeJS.Timeout | undefined;
  private inFlight = new Set<Promise<void>>();
  private readonly sandboxStats: StatsBatch;

  constructor(
    private readonly o: {
      redis: RedisClient;
      keys: Keys;
      store: CallStore;
      registry: ToolRegistry;
      audit: AuditLog;
      stats: Stats;
      metrics: WorkerMetrics;
      log: Logger;
    },
  ) {
    this.sandboxStats = new StatsBatch(
      this.o.redis,
      this.o.stats,
      (err, calls) =>
        this.o.log.error({ err, calls }, 'could not count sandbox calls in the stats'),
      { delayMs: SANDBOX_STATS_DELAY_MS, index: 'upkeep' },
    );
  }

  add(finished: Finished): void {
    if (finished.kind === 'sandbox') {
      this.sandboxStats.add(finished.outcome, finished.call.clientId);
      finished = { ...finished, statsApart: true };
    }
    this.pending.push(finished);
    if (this.pending.length >= MAX_BATCH) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), MAX_DELAY_MS);
  }

  /** Writes one call's at once, outside the batches (resolves once it has landed). */
  async now(finished: Finished): Promise<void> {
    await this.writeRetrying([finished], NOW_RETRY_FOR_MS);
  }

  /** Writes everything pending now; resolves when every write so far has landed. */
  async drain(): Promise<void> {
    this.flush();
    await Promise.all([...this.inFlight, this.sandboxStats.drain()]);
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    const writing = this.writeRetrying(batch)
      .catch((err: unknown) =>
        this.o.log.error({ err, calls: batch.length }, 'could not record call outcomes'),
      )
      .finally(() => this.inFlight.delete(writing));
    this.inFlight.add(writing);
  }

  private async writeRetrying(batch: Finished[], retryForMs = RETRY_FOR_MS): Promise<void> {
    const started = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        await this.write(batch, attempt === 0);
        return;
      } catch (err) {
        if (Date.now() - started > retryForMs) throw err;
        this.o.log.warn(
          { err: (err as Error).message, calls: batch.length, attempt },
          'could not record call outcomes yet; trying again',
        );
        await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 2000)));
      }
    }
  }

  /**
   * One transaction: all of a batch lands or none of it, so a batch tried again after a failed
   * write never counts a call twice in the stats or the audit log.
   */
  private async write(batch: Finished[], first: boolean): Promise<void> {
    const { redis, store, registry, audit, stats, metrics, keys } = this.o;
    const pipeline = redis.multi();
    for (const { call, kind, outcome, end } of batch) {
      const entry = audit.entry({
        event: 'call',
        client: call.clientId,
        ...(call.user === undefined ? {} : { user: call.user }),
        tool: call.tool,
        status:
          outcome.status === 'error' ? `error:${outcome.error?.code ?? 'unknown'}` : outcome.status,
        callId: call.id,
        durationMs: outcome.durationMs,
        args: call.args,
        ...(call.approvedBy ? { by: call.approvedBy } : {}),
        ...(call.parentCallId ? { parentCallId: call.parentCallId } : {}),
        ...(call.policy ? { policy: call.policy } : {}),
      });
      // The audit entry's redacted arguments are the record's too (one redaction per call).
      store.addTo(pipeline, finishedRecord({ ...call, redactedArgs: entry.args }, kind, outcome));
      if (end) publishOutcome(pipeline, keys, end);
      audit.addTo(pipeline, entry);
      const tool = registry.get(call.tool);
      if (tool && tool.cacheTtlSeconds > 0) {
        stats.countCache(pipeline, 'misses', 1, call.clientId);
        // The process's counter: once per call, however often the batch is tried.
        if (first) metrics.cacheLookups.inc({ tool: call.tool, result: 'miss' });
      }
    }
    stats.addBatch(
      pipeline,
      batch
        .filter(({ statsApart }) => !statsApart)
        .map(({ call, outcome }) => ({
          outcome,
          clientId: call.clientId,
          ...(call.user === undefined ? {} : { user: call.user }),
        })),
      { index: 'upkeep' },
    );
    const results = (await pipeline.exec()) ?? [];
    const failed = results.find(([err]) => err);
    if (failed) throw failed[0];
  }
}
