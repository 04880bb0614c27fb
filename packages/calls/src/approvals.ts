import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { LuaScript } from './script.js';
import type { CallStore } from './store.js';
import type { CallBrief, CallJob, CallOutcome, CallRecord, QueueKind } from './types.js';

/** Pending approvals one read lists, oldest first (GET /v1/approvals, the feed's snapshot). */
export const PENDING_LISTED = 200;
/** Bytes of old-format records (no brief) one read of the pending list may load. */
const PENDING_LEGACY_BYTES = 1024 * 1024;

/**
 * Takes one of a client's pending-approval places: drops its entries whose window has passed
 * (time is Redis's), refuses at the limit, else adds the call. Returns the count after adding,
 * or minus the count held when refused.
 *   KEYS: the client's pending set
 *   ARGV: call id, expiry (epoch ms), limit
 */
const RESERVE = new LuaScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[3]) then return -held end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return held + 1
`);

/** The pending list as listed: the oldest PENDING_LISTED, and how many each client has. */
export interface PendingList {
  pending: CallBrief[];
  /** Every pending call, listed or not. */
  total: number;
  /** Pending calls per client (every one, listed or not). */
  byClient: Record<string, number>;
}

export type Decision =
  { kind: 'approve'; by: string } | { kind: 'reject'; by: string; reason?: string };

/**
 * Human in the loop: parked calls (status pending_approval) wait in a sorted set scored by
 * their expiry. Exactly one decision wins: whoever removes the id from the set.
 */
export class Approvals {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly store: CallStore,
    private readonly ttlSeconds: number,
  ) {}

  /**
   * Parks a call unless its client already has `limit` calls parked (`limits.pendingApprovals`):
   * then returns how many it has, and nothing is written.
   */
  async park(
    job: CallJob,
    queue: QueueKind,
    limit: number,
  ): Promise<{ parked: CallRecord } | { refused: number }> {
    const expiresAt = Date.now() + this.ttlSeconds * 1000;
    const mine = this.keys.clientApprovals(job.clientId);
    const held = (await RESERVE.run(this.redis, [mine], [job.id, expiresAt, limit])) as number;
    if (held <= 0) return { refused: -held };
    const record: CallRecord = {
      id: job.id,
      tool: job.tool,
      clientId: job.clientId,
      ...(job.user === undefined ? {} : { user: job.user }),
      status: 'pending_approval',
      queue,
      createdAt: job.acceptedAt,
      job,
      expiresAt,
    };
    const multi = this.redis.multi();
    this.store.addTo(multi, record);
    multi.zadd(this.keys.approvals, expiresAt, job.id);
    try {
      const failed = ((await multi.exec()) ?? []).find(([err]) => err);
      if (failed) throw failed[0];
    } catch (err) {
      await this.redis.zrem(mine, job.id).catch(() => undefined);
      throw err;
    }
    return { parked: record };
  }

  /**
   * Pending calls, oldest first, at most PENDING_LISTED of them, as briefs (a parked call's
   * arguments as a preview: each at most BRIEF_MAX_BYTES), with the count per client.
   * Expired ones are settled on the way.
   */
  async pending(clientIds: readonly string[]): Promise<PendingList> {
    await this.expireOverdue();
    const now = Date.now();
    const multi = this.redis
      .multi()
      .zrangebyscore(this.keys.approvals, now, '+inf', 'LIMIT', 0, PENDING_LISTED)
      .zcount(this.keys.approvals, now, '+inf');
    for (const c of clientIds) multi.zcount(this.keys.clientApprovals(c), now, '+inf');
    const replies = ((await multi.exec()) ?? []).map(([err, reply]) => {
      if (err) throw err;
      return reply;
    });
    const ids = replies[0] as string[];
    const { briefs } = await this.store.briefs(ids, { bytes: PENDING_LEGACY_BYTES });
    const byClient: Record<string, number> = {};
    clientIds.forEach((c, i) => {
      const n = replies[2 + i] as number;
      if (n > 0) byClient[c] = n;
    });
    return {
      pending: briefs
        .filter((b): b is CallBrief => b?.status === 'pending_approval')
        .sort((a, b) => a.createdAt - b.createdAt),
      total: replies[1] as number,
      byClient,
    };
  }

  async count(): Promise<number> {
    return this.redis.zcount(this.keys.approvals, Date.now(), '+inf');
  }

  /**
   * Applies a decision. Returns the updated record (approved calls come back `queued` with
   * their job, for the caller to enqueue), or the unchanged record when another decision or
   * the expiry got there first, or undefined for an unknown id.
   */
  async decide(
    id: string,
    decision: Decision,
  ): Promise<{ record: CallRecord; won: boolean } | undefined> {
    const record = await this.store.get(id);
    if (!record) return undefined;
    const won = (await this.redis.zrem(this.keys.approvals, id)) === 1;
    if (won) await this.release(record);
    if (!won || record.status !== 'pending_approval') return { record, won: false };
    const at = new Date().toISOString();
    if ((record.expiresAt ?? Infinity) < Date.now()) {
      return { record: await this.settle(record, 'expired', 'system'), won: false };
    }
    if (decision.kind === 'approve') {
      const approved: CallRecord = {
        ...record,
        status: 'queued',
        approval: { decision: 'approved', by: decision.by, at },
      };
      await this.store.put(approved);
      return { record: approved, won: true };
    }
    return {
      record: await this.settle(record, 'rejected', decision.by, decision.reason),
      won: true,
    };
  }

  /**
   * Cancels a parked call (its client or an admin): it will never run. Undefined when a
   * decision or the expiry got there first.
   */
  async cancel(id: string, by: string): Promise<CallRecord | undefined> {
    const record = await this.store.get(id);
    if (record?.status !== 'pending_approval') return undefined;
    if ((await this.redis.zrem(this.keys.approvals, id)) !== 1) return undefined;
    await this.release(record);
    const cancelled: CallRecord = {
      ...record,
      status: 'cancelled',
      outcome: cancelledOutcome(record, by),
      cancel: { by, at: new Date().toISOString() },
    };
    delete cancelled.job;
    await this.store.put(cancelled);
    return cancelled;
  }

  /** Marks calls whose approval window passed as expired; returns them. */
  async expireOverdue(): Promise<CallRecord[]> {
    const ids = await this.redis.zrangebyscore(this.keys.approvals, '-inf', Date.now());
    const expired: CallRecord[] = [];
    for (const id of ids) {
      if ((await this.redis.zrem(this.keys.approvals, id)) !== 1) continue;
      const record = await this.store.get(id);
      if (record) await this.release(record);
      if (record?.status === 'pending_approval')
        expired.push(await this.settle(record, 'expired', 'system'));
    }
    return expired;
  }

  /** Gives back the client's place of a call that left the pending set (decided, cancelled, expired). */
  private async release(record: CallRecord): Promise<void> {
    await this.redis.zrem(this.keys.clientApprovals(record.clientId), record.id);
  }

  private async settle(
    record: CallRecord,
    decision: 'rejected' | 'expired',
    by: string,
    reason?: string,
  ): Promise<CallRecord> {
    const message =
      decision === 'rejected'
        ? `An administrator (${by}) rejected this call${reason ? `: ${reason}` : ''}. Do not retry it.`
        : `Nobody approved this call within ${this.ttlSeconds} seconds, so it expired without running.`;
    const outcome: CallOutcome = {
      id: record.id,
      tool: record.tool,
      status: 'error',
      error: { code: decision, message },
      durationMs: 0,
      cached: false,
    };
    const settled: CallRecord = {
      ...record,
      status: decision,
      outcome,
      approval: { decision, by, at: new Date().toISOString(), ...(reason ? { reason } : {}) },
    };
    delete settled.job;
    await this.store.put(settled);
    return settled;
  }
}

/** The outcome of a call stopped by a cancel (before or while it ran). */
export function cancelledOutcome(
  call: Pick<CallRecord, 'id' | 'tool'>,
  by: string,
  durationMs = 0,
): CallOutcome {
  return {
    id: call.id,
    tool: call.tool,
    status: 'cancelled',
    error: { code: 'cancelled', message: `The call was cancelled by ${by}.`, details: { by } },
    durationMs,
    cached: false,
  };
}
