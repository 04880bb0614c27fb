import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
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
    private readonly redis: RedisClient,
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

  /** Many records in one round trip (undefined where there is none). */
  async getMany(ids: readonly string[]): Promise<(CallRecord | undefined)[]> {
    if (ids.length === 0) return [];
    const texts = await this.redis.mget(ids.map((id) => this.keys.call(id)));
    return texts.map((t) => (t ? (JSON.parse(t) as CallRecord) : undefined));
  }

  async get(id: string): Promise<CallRecord | undefined> {
    const text = await this.redis.get(this.keys.call(id));
    return text ? (JSON.parse(text) as CallRecord) : undefined;
  }

  /**
   * Claims an idempotency key for a call, bound to the request's fingerprint (tool + canonical
   * arguments, see `canonicalDigest`): one SET NX of `<callId>:<fingerprint>`. Returns the call
   * that already holds the key, and whether it was made by the same request, or undefined when
   * this call now holds the key.
   */
  async claimIdempotencyKey(
    clientId: string,
    key: string,
    callId: string,
    fingerprint: string,
  ): Promise<{ id: string; sameRequest: boolean } | undefined> {
    const redisKey = this.keys.idempotency(clientId, key);
    const value = `${callId}:${fingerprint}`;
    const set = await this.redis.set(redisKey, value, 'EX', this.ttlSeconds, 'NX');
    if (set === 'OK') return undefined;
    const holder = await this.redis.get(redisKey);
    // Expired between the two commands: nobody holds it now, so claim it again.
    if (holder === null) return this.claimIdempotencyKey(clientId, key, callId, fingerprint);
    const at = holder.indexOf(':');
    // A key written before fingerprints were stored holds a bare call id: it cannot be checked.
    if (at < 0) return { id: holder, sameRequest: true };
    return { id: holder.slice(0, at), sameRequest: holder.slice(at + 1) === fingerprint };
  }

  /** Frees a key this call claimed but never used (the call was not accepted). */
  async releaseIdempotencyKey(clientId: string, key: string, callId: string): Promise<void> {
    const redisKey = this.keys.idempotency(clientId, key);
    const holder = await this.redis.get(redisKey);
    if (holder?.startsWith(`${callId}:`)) await this.redis.del(redisKey);
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
  call: Pick<CallJob, 'id' | 'tool' | 'clientId' | 'acceptedAt' | 'approvedBy' | 'trace'> & {
    /** Already redacted (the audit entry's copy); stored as a preview. */
    redactedArgs?: unknown;
  },
  queue: QueueKind,
  outcome: CallOutcome,
): CallRecord {
  const traceId = call.trace?.traceparent?.split('-')[1];
  return {
    id: call.id,
    tool: call.tool,
    clientId: call.clientId,
    status: outcome.status,
    queue,
    createdAt: call.acceptedAt,
    outcome,
    ...(call.redactedArgs === undefined ? {} : { arguments: argsPreview(call.redactedArgs) }),
    ...(traceId ? { traceId } : {}),
    ...(outcome.status === 'cancelled'
      ? { cancel: { by: cancelledBy(outcome), at: new Date().toISOString() } }
      : {}),
    ...(call.approvedBy
      ? { approval: { decision: 'approved', by: call.approvedBy, at: new Date().toISOString() } }
      : {}),
  };
}

function cancelledBy(outcome: CallOutcome): string {
  const details = outcome.error?.details as { by?: unknown } | undefined;
  return typeof details?.by === 'string' ? details.by : 'unknown';
}

/** Arguments kept with a finished record: as they are up to 4 KiB of JSON, else cut text. */
export const ARGS_PREVIEW_CHARS = 4096;

export function argsPreview(redacted: unknown): unknown {
  const json = JSON.stringify(redacted);
  if (json === undefined || json.length <= ARGS_PREVIEW_CHARS) return redacted;
  return `${json.slice(0, ARGS_PREVIEW_CHARS)}…`;
}
