import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import type { CallStore } from './store.js';
import type { CallJob, CallOutcome, CallRecord, QueueKind } from './types.js';

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

  async park(job: CallJob, queue: QueueKind): Promise<CallRecord> {
    const expiresAt = Date.now() + this.ttlSeconds * 1000;
    const record: CallRecord = {
      id: job.id,
      tool: job.tool,
      clientId: job.clientId,
      status: 'pending_approval',
      queue,
      createdAt: job.acceptedAt,
      job,
      expiresAt,
    };
    const multi = this.redis.multi();
    this.store.addTo(multi, record);
    await multi.zadd(this.keys.approvals, expiresAt, job.id).exec();
    return record;
  }

  /** Pending calls, oldest first (expired ones are settled on the way). */
  async pending(): Promise<CallRecord[]> {
    await this.expireOverdue();
    const ids = await this.redis.zrangebyscore(this.keys.approvals, Date.now(), '+inf');
    const records = await Promise.all(ids.map((id) => this.store.get(id)));
    return records
      .filter((r): r is CallRecord => r?.status === 'pending_approval')
      .sort((a, b) => a.createdAt - b.createdAt);
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
      if (record?.status === 'pending_approval')
        expired.push(await this.settle(record, 'expired', 'system'));
    }
    return expired;
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
