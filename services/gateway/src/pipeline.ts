import { randomUUID } from 'node:crypto';
import {
  isRedisDown,
  liveWorkers,
  type CallOutcome,
  type CallRecord,
  type CallStore,
  type Dispatcher,
  type Keys,
  type QueueKind,
} from '@toolgate/calls';
import type { ToolRegistry } from '@toolgate/registry';
import type { Redis } from 'ioredis';
import type { Client } from './clients.js';
import { ApiError } from './errors.js';

export interface CallRequest {
  tool: string;
  args: unknown;
  /** false: answer at once with the queued call (202). */
  wait: boolean;
  idempotencyKey?: string;
  conversationId?: string;
}

/** A finished call (200), or an accepted one still in flight (202). */
export type CallResponse =
  | { kind: 'done'; outcome: CallOutcome }
  | { kind: 'accepted'; id: string; status: CallRecord['status'] };

export interface PipelineOptions {
  redis: Redis;
  keys: Keys;
  store: CallStore;
  dispatcher: Dispatcher;
  registry: ToolRegistry;
  syncWaitGraceMs: number;
}

const LIVENESS_CACHE_MS = 1000;

/**
 * One path for every call, whatever the dialect: scope → schema → idempotency → enqueue →
 * wait. Throws ApiError for problems with the request itself; tool failures are outcomes.
 */
export class CallPipeline {
  private workersSeenAt = 0;

  constructor(private readonly o: PipelineOptions) {}

  async call(client: Client, req: CallRequest): Promise<CallResponse> {
    const tool = this.o.registry.get(req.tool);
    if (!tool) throw new ApiError('unknown_tool', `no tool named "${req.tool}"`);
    if (!client.scope.allows(tool)) {
      throw new ApiError('forbidden', `client "${client.id}" may not call "${tool.name}"`);
    }
    if (typeof req.args !== 'object' || req.args === null || Array.isArray(req.args)) {
      throw new ApiError('invalid_json', 'the arguments must be a JSON object');
    }
    const checked = this.o.registry.validate(tool.name, req.args);
    if (!checked.ok) throw ApiError.invalidArguments(tool.name, checked.issues);

    return guardRedis(async () => {
      await this.requireWorkers();
      if (req.wait && !(await this.o.dispatcher.ready(2000))) {
        throw new ApiError('unavailable', 'Redis is unavailable; the call was not accepted', {
          headers: { 'Retry-After': '2' },
        });
      }
      const id = randomUUID();
      if (req.idempotencyKey) {
        const holder = await this.o.store.claimIdempotencyKey(client.id, req.idempotencyKey, id);
        if (holder) return this.existing(holder, req.wait, tool.timeoutMs);
      }
      const kind: QueueKind = tool.sandbox ? 'sandbox' : 'fast';
      const acceptedAt = Date.now();
      const job = {
        id,
        tool: tool.name,
        args: checked.args,
        clientId: client.id,
        acceptedAt,
        ...(req.conversationId ? { conversationId: req.conversationId } : {}),
      };
      let outcome: Promise<CallOutcome | undefined> | undefined;
      try {
        outcome = req.wait
          ? this.o.dispatcher.expect(id, tool.timeoutMs + this.o.syncWaitGraceMs)
          : undefined;
        await this.o.dispatcher.enqueue(job, kind);
      } catch (err) {
        // Not accepted: free the idempotency key so a retry can run the call.
        if (req.idempotencyKey)
          await this.o.store
            .releaseIdempotencyKey(client.id, req.idempotencyKey, id)
            .catch(() => undefined);
        throw err;
      }
      if (!outcome) return { kind: 'accepted', id, status: 'queued' };
      const done = await outcome;
      return done ? { kind: 'done', outcome: done } : { kind: 'accepted', id, status: 'running' };
    }, this.o.redis);
  }

  /** The current state of a call the client may see (its own; admins see all). */
  async get(client: Client, id: string): Promise<CallRecord> {
    return guardRedis(async () => {
      const record = await this.o.dispatcher.lookup(id);
      if (!record || (record.clientId !== client.id && !client.admin)) {
        throw new ApiError('not_found', `no call with id "${id}"`);
      }
      return record;
    }, this.o.redis);
  }

  /** A retry with a known idempotency key: the first call's result, never a second run. */
  private async existing(id: string, wait: boolean, timeoutMs: number): Promise<CallResponse> {
    // Undefined while a concurrent first request is still enqueueing: treat it as queued.
    const record = await this.o.dispatcher.lookup(id);
    if (record?.outcome) return { kind: 'done', outcome: record.outcome };
    const status = record?.status ?? 'queued';
    if (!wait || (status !== 'queued' && status !== 'running'))
      return { kind: 'accepted', id, status };
    const outcome = await this.o.dispatcher.waitFor(id, timeoutMs + this.o.syncWaitGraceMs);
    return outcome ? { kind: 'done', outcome } : { kind: 'accepted', id, status: 'running' };
  }

  private async requireWorkers(): Promise<void> {
    const now = Date.now();
    if (now - this.workersSeenAt < LIVENESS_CACHE_MS) return;
    const alive = await liveWorkers(this.o.redis, this.o.keys);
    if (alive === 0)
      throw new ApiError('unavailable', 'no worker is running; the call was not accepted', {
        headers: { 'Retry-After': '5' },
      });
    this.workersSeenAt = now;
  }
}

/** Redis connection failures become 503 unavailable. */
export async function guardRedis<T>(fn: () => Promise<T>, redis?: Redis): Promise<T> {
  // Reconnecting after a loss: fail now rather than wait for the next reconnect attempt.
  if (
    redis &&
    (redis.status === 'reconnecting' || redis.status === 'end' || redis.status === 'close')
  ) {
    throw new ApiError('unavailable', 'Redis is unavailable; the call was not accepted', {
      headers: { 'Retry-After': '2' },
    });
  }
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof ApiError) && isRedisDown(err)) {
      throw new ApiError('unavailable', 'Redis is unavailable; the call was not accepted', {
        cause: err,
        headers: { 'Retry-After': '2' },
      });
    }
    throw err;
  }
}
