import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { capOutcome } from './result-cap.js';
import { redact } from './redact.js';
import type { CallBrief, CallJob, CallOutcome, CallRecord, QueueKind } from './types.js';

/**
 * Bound of one brief's JSON, in bytes: the short fields cut to BRIEF_FIELD_CHARS, a parked
 * call's argument preview (≤ ARGS_PREVIEW_CHARS characters, ≤ 3 bytes each) and the JSON around.
 */
export const BRIEF_MAX_BYTES = 16 * 1024;
/** Characters kept of a brief's free-text fields (tool, client, error code, conversation). */
const BRIEF_FIELD_CHARS = 128;

/** Records written before briefs existed: the most bytes of them one read may load, in all. */
export interface LegacyBudget {
  bytes: number;
}

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

  /** Adds the record's write, and its brief's, to a MULTI/pipeline the caller is building. */
  addTo(multi: ChainableCommander, record: CallRecord): void {
    multi
      .set(this.keys.call(record.id), this.serialize(record), 'EX', this.ttlSeconds)
      .set(this.keys.callBrief(record.id), JSON.stringify(briefOf(record)), 'EX', this.ttlSeconds);
  }

  async put(record: CallRecord): Promise<void> {
    const multi = this.redis.multi();
    this.addTo(multi, record);
    const failed = ((await multi.exec()) ?? []).find(([err]) => err);
    if (failed) throw failed[0];
  }

  /**
   * The briefs of many calls in one round trip (undefined where the call has no record), and
   * the bytes Redis sent for them. A record written before briefs existed is read whole once,
   * while `legacy` has bytes left, and its brief written for the next reader (with the
   * record's remaining lifetime); beyond that budget it reads as undefined.
   */
  async briefs(
    ids: readonly string[],
    legacy: LegacyBudget,
  ): Promise<{ briefs: (CallBrief | undefined)[]; bytes: number }> {
    if (ids.length === 0) return { briefs: [], bytes: 0 };
    const texts = await this.redis.mget(ids.map((id) => this.keys.callBrief(id)));
    let bytes = 0;
    const briefs = texts.map((t) => {
      if (t === null) return undefined;
      bytes += Buffer.byteLength(t);
      return JSON.parse(t) as CallBrief;
    });
    const missing = ids.filter((_, i) => briefs[i] === undefined);
    if (missing.length === 0 || legacy.bytes <= 0) return { briefs, bytes };
    // Sizes first, so a record is read only when the budget covers it.
    const sizes = await Promise.all(missing.map((id) => this.redis.strlen(this.keys.call(id))));
    for (const [j, id] of missing.entries()) {
      const size = sizes[j]!;
      if (size === 0 || size > legacy.bytes) continue;
      legacy.bytes -= size;
      const text = await this.redis.get(this.keys.call(id));
      if (!text) continue;
      bytes += Buffer.byteLength(text);
      const brief = briefOf(JSON.parse(text) as CallRecord);
      briefs[ids.indexOf(id)] = brief;
      const ttl = await this.redis.pttl(this.keys.call(id));
      if (ttl > 0) {
        await this.redis.set(this.keys.callBrief(id), JSON.stringify(brief), 'PX', ttl, 'NX');
      }
    }
    return { briefs, bytes };
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

/** A record's brief: what listings show of it, bounded by BRIEF_MAX_BYTES. */
export function briefOf(record: CallRecord): CallBrief {
  const error = record.outcome?.error?.code;
  const job = record.status === 'pending_approval' ? record.job : undefined;
  return {
    id: record.id,
    tool: cutText(record.tool, BRIEF_FIELD_CHARS),
    clientId: cutText(record.clientId, BRIEF_FIELD_CHARS),
    // Not cut: at most MAX_USER_LENGTH (256) characters, checked when the token is read.
    ...(record.user === undefined ? {} : { user: record.user }),
    status: record.status,
    createdAt: record.createdAt,
    ...(record.outcome
      ? { durationMs: record.outcome.durationMs, cached: record.outcome.cached }
      : {}),
    ...(error ? { errorCode: cutText(String(error), BRIEF_FIELD_CHARS) } : {}),
    ...(record.expiresAt === undefined ? {} : { expiresAt: record.expiresAt }),
    ...(job?.conversationId
      ? { conversationId: cutText(job.conversationId, BRIEF_FIELD_CHARS) }
      : {}),
    ...(job ? { arguments: argsPreview(redact(job.args)) } : {}),
  };
}

function cutText(text: string, chars: number): string {
  return text.length > chars ? `${text.slice(0, chars)}…` : text;
}

/** The record of a call that ran (or was answered) and finished with `outcome`. */
export function finishedRecord(
  call: Pick<
    CallJob,
    'id' | 'tool' | 'clientId' | 'user' | 'acceptedAt' | 'approvedBy' | 'trace' | 'policy'
  > & {
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
    ...(call.user === undefined ? {} : { user: call.user }),
    status: outcome.status,
    queue,
    createdAt: call.acceptedAt,
    outcome,
    ...(call.redactedArgs === undefined ? {} : { arguments: argsPreview(call.redactedArgs) }),
    ...(traceId ? { traceId } : {}),
    ...(call.policy ? { policy: call.policy } : {}),
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
