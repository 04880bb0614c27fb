import type { ChainableCommander, Redis } from 'ioredis';
import type { Keys } from './keys.js';
import { capOutcome } from './result-cap.js';
import type { CallJob, CallOutcome, CallRecord, QueueKind } from './types.js';

/**
 * Call records in Redis, each a JSON string that expires after `calls.ttlSeconds`. The one
 * place a record is serialised: every writer (worker recorder, gateway answers, approvals)
 * goes through `addTo`/`put`, which cap the stored result at `calls.maxResultBytes`.
 */
export class CallStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    readonly ttlSeconds: number,
    readonly maxResultBytes: number,
  ) {}

  /** Adds the record's write to a MULTI/pipeline the caller is building. */
  addTo(multi: ChainableCommander, record: CallRecord): void {
    multi.set(this.keys.call(record.id), this.serialize(record), 'EX', this.ttlSeconds);
  }

  async put(record: CallRecord): Promise<void> {
    await this.redis.set(this.keys.call(record.id), this.serialize(record), 'EX', this.ttlSeconds);
  }

  async get(id: string): Promise<CallRecord | undefined> {
    const text = await this.redis.get(this.keys.call(id));
    return text ? (JSON.parse(text) as CallRecord) : undefined;
  }

  /**
   * Claims an idempotency key for a call. Returns the id of the call that already holds the
   * key, or undefined when this call now holds it.
   */
  async claimIdempotencyKey(
    clientId: string,
    key: string,
    callId: string,
  ): Promise<string | undefined> {
    const redisKey = this.keys.idempotency(clientId, key);
    const set = await this.redis.set(redisKey, callId, 'EX', this.ttlSeconds, 'NX');
    if (set === 'OK') return undefined;
    const holder = await this.redis.get(redisKey);
    return holder ?? undefined;
  }

  /** Frees a key this call claimed but never used (the call was not accepted). */
  async releaseIdempotencyKey(clientId: string, key: string, callId: string): Promise<void> {
    const redisKey = this.keys.idempotency(clientId, key);
    if ((await this.redis.get(redisKey)) === callId) await this.redis.del(redisKey);
  }

  private serialize(record: CallRecord): string {
    const stored = record.outcome
      ? { ...record, outcome: capOutcome(record.outcome, this.maxResultBytes) }
      : record;
    return JSON.stringify(stored);
  }
}

/** The record of a call that ran (or was answered) and finished with `outcome`. */
export function finishedRecord(
  call: Pick<CallJob, 'id' | 'tool' | 'clientId' | 'acceptedAt' | 'approvedBy'>,
  queue: QueueKind,
  outcome: CallOutcome,
): CallRecord {
  return {
    id: call.id,
    tool: call.tool,
    clientId: call.clientId,
    status: outcome.status,
    queue,
    createdAt: call.acceptedAt,
    outcome,
    ...(call.approvedBy
      ? { approval: { decision: 'approved', by: call.approvedBy, at: new Date().toISOString() } }
      : {}),
  };
}
