/**
 * MCP tasks mapped onto toolgate's call records: the task id is the call id, so any gateway
 * answers `tasks/*` for any call (the record is in Redis) and a task lives as long as its
 * record (`calls.ttlSeconds`). Two dialects (docs/mcp.md):
 *
 * - 2025-11-25 tasks utility: the client asks for a task (`params.task` on tools/call) and
 *   polls `tasks/get`, blocks on `tasks/result`, stops with `tasks/cancel`.
 * - 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`): the server decides. A call
 *   that waits for an administrator's approval becomes a task for every client that declares
 *   the extension; `tasks/get` carries the result once there is one.
 *
 * The SDK (v2) keeps only the 2025 task schemas and no runtime for either, so these messages
 * are answered here, before the per-request MCP server, as plain JSON-RPC responses.
 */
import { FINAL_STATUSES, type CallOutcome, type CallRecord } from '@toolgate/calls';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import {
  CLIENT_CAPABILITIES_META_KEY,
  PROTOCOL_VERSION_META_KEY,
  ProtocolErrorCode,
  RELATED_TASK_META_KEY,
  type CallToolResult,
} from '@modelcontextprotocol/server';
import { ApiError } from '../errors.js';
import type { CallPipeline, CallResponse } from '../pipeline.js';
import type { McpCaller } from './caller.js';
import { refusal, toResult } from './tools.js';

export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

/** How often a client should poll: a running call soon ends, an approval takes a person. */
const POLL_RUNNING_MS = 1000;
const POLL_APPROVAL_MS = 5000;

type JsonRpcId = string | number;
export type JsonRpcAnswer =
  | { jsonrpc: '2.0'; id: JsonRpcId; result: Record<string, unknown> }
  | { jsonrpc: '2.0'; id: JsonRpcId; error: { code: number; message: string; data?: unknown } };

interface Message {
  id: JsonRpcId;
  method: string;
  params: Record<string, unknown>;
}

export interface McpTasksDeps {
  registry: ToolRegistry;
  pipeline: Pick<CallPipeline, 'call' | 'get' | 'cancel' | 'watch'>;
  requiresApproval: (tool: Tool) => boolean;
  /** How long call records live (`calls.ttlSeconds`): the tasks' ttl. */
  ttlMs: number;
}

export class McpTasks {
  constructor(private readonly o: McpTasksDeps) {}

  /**
   * The answer to a task message, or undefined for any other message (the MCP server answers
   * it). `signal` aborts a blocking `tasks/result` when the client goes away.
   */
  async answer(
    caller: McpCaller,
    body: unknown,
    signal: AbortSignal,
  ): Promise<JsonRpcAnswer | undefined> {
    const message = asRequest(body);
    if (!message) return undefined;
    const modern = typeof meta(message)[PROTOCOL_VERSION_META_KEY] === 'string';
    const taskId = typeof message.params['taskId'] === 'string' ? message.params['taskId'] : '';
    try {
      switch (message.method) {
        case 'tools/call':
          return await this.maybeCreate(caller, message, modern);
        case 'tasks/get':
          return ok(message, await this.get(caller, taskId, modern));
        case 'tasks/result':
          return modern ? undefined : ok(message, await this.result(caller, taskId, signal));
        case 'tasks/cancel':
          return ok(message, await this.cancel(caller, taskId, modern));
        case 'tasks/update':
          // No toolgate task ever asks the client for input: nothing to update, nothing owed.
          if (!modern) return undefined;
          await this.o.pipeline.get(caller.client, taskId);
          return ok(message, { resultType: 'complete' });
        default:
          return undefined;
      }
    } catch (err) {
      if (err instanceof TaskError)
        return fail(message, ProtocolErrorCode.InvalidParams, err.message);
      if (!(err instanceof ApiError)) throw err;
      if (err.code === 'not_found') {
        return fail(message, ProtocolErrorCode.InvalidParams, `no task with id "${taskId}"`);
      }
      const refused = refusal(err);
      return 'result' in refused
        ? ok(message, { ...refused.result })
        : fail(message, refused.error.code, refused.error.message, refused.error.data);
    }
  }

  /** A task-augmented call (2025), or a call that waits for approval from a 2026 client that takes tasks. */
  private async maybeCreate(
    caller: McpCaller,
    message: Message,
    modern: boolean,
  ): Promise<JsonRpcAnswer | undefined> {
    const name = typeof message.params['name'] === 'string' ? message.params['name'] : '';
    if (modern) {
      const tool = this.o.registry.get(name);
      if (!tool || !this.o.requiresApproval(tool) || !takesTasks(message)) return undefined;
    } else if (!isRecord(message.params['task'])) {
      return undefined;
    }
    const { client, prepaid, conversationId } = caller;
    const response: CallResponse = await this.o.pipeline.call(client, {
      tool: name,
      args: message.params['arguments'] ?? {},
      wait: false,
      ...(prepaid ? { prepaid } : {}),
      ...(conversationId ? { conversationId } : {}),
      ...(caller.sourceIp ? { sourceIp: caller.sourceIp } : {}),
    });
    // Answered at once (a cache hit, the tool's precheck refusing): a 2026 client gets the
    // result itself; a 2025 client asked for a task, and gets one that has completed.
    if (response.kind === 'done' && modern)
      return ok(message, { ...toResult(response, this.o.registry.get(name)) });
    const record = await this.o.pipeline.get(client, callIdOf(response));
    const task = this.task(record, modern);
    return ok(message, modern ? { resultType: 'task', ...task } : { task });
  }

  private async get(caller: McpCaller, id: string, modern: boolean) {
    const record = await this.o.pipeline.get(caller.client, id);
    const task = this.task(record, modern);
    if (!modern) return task;
    // 2026: a finished task carries what tools/call would have answered.
    const result = record.outcome ? { result: resultOf(record.outcome, this.o.registry) } : {};
    return { resultType: 'complete', ...task, ...result };
  }

  /** 2025 `tasks/result`: blocks until the call has ended, then answers as tools/call would have. */
  private async result(caller: McpCaller, id: string, signal: AbortSignal) {
    let outcome: CallOutcome | undefined;
    await this.o.pipeline.watch(
      caller.client,
      id,
      (event) => {
        if (event.type === 'outcome') outcome = event.outcome;
      },
      signal,
    );
    if (!outcome) throw new TaskError('the client went away before the task ended');
    const result = resultOf(outcome, this.o.registry);
    return { ...result, _meta: { ...result._meta, [RELATED_TASK_META_KEY]: { taskId: id } } };
  }

  private async cancel(caller: McpCaller, id: string, modern: boolean) {
    let record = await this.o.pipeline.get(caller.client, id);
    if (FINAL_STATUSES.has(record.status)) {
      if (modern) return { resultType: 'complete' };
      throw new TaskError(`task "${id}" has already ended (${taskStatus(record)})`);
    }
    try {
      record = await this.o.pipeline.cancel(caller.client, id);
    } catch (err) {
      // Ended in the meantime: 2026 acknowledges anyway, 2025 reports the terminal task.
      if (!(err instanceof ApiError) || err.code !== 'conflict') throw err;
      if (modern) return { resultType: 'complete' };
      throw new TaskError(`task "${id}" has already ended`);
    }
    if (modern) return { resultType: 'complete' };
    // It finished before the cancel reached it: a terminal task, which 2025 cannot cancel.
    if (record.status !== 'cancelled' && FINAL_STATUSES.has(record.status)) {
      throw new TaskError(`task "${id}" has already ended (${taskStatus(record)})`);
    }
    // The worker may still be stopping it (it records `cancelled` itself): the task is
    // cancelled from now on, as the 2025 spec asks before the answer.
    return { ...this.task(record, false), status: 'cancelled' };
  }

  private task(record: CallRecord, modern: boolean) {
    const status = taskStatus(record);
    const finishedAt = record.outcome ? record.createdAt + record.outcome.durationMs : Date.now();
    const poll = record.status === 'pending_approval' ? POLL_APPROVAL_MS : POLL_RUNNING_MS;
    const message = STATUS_MESSAGES[record.status];
    return {
      taskId: record.id,
      status,
      ...(message ? { statusMessage: message } : {}),
      createdAt: new Date(record.createdAt).toISOString(),
      lastUpdatedAt: new Date(Math.max(record.createdAt, finishedAt)).toISOString(),
      ...(modern
        ? { ttlMs: this.o.ttlMs, ...(status === 'working' ? { pollIntervalMs: poll } : {}) }
        : { ttl: this.o.ttlMs, ...(status === 'working' ? { pollInterval: poll } : {}) }),
    };
  }
}

const STATUS_MESSAGES: Partial<Record<CallRecord['status'], string>> = {
  queued: 'Queued for a worker.',
  running: 'Running.',
  pending_approval: 'Waiting for an administrator to approve the call.',
  rejected: 'An administrator rejected the call; it did not run.',
  expired: 'Nobody approved the call in time; it did not run.',
};

/**
 * Call status → task status. Every way a call ends with an answer the model reads (a tool
 * error, a rejected or expired approval) is `completed` with an isError result, as the 2026
 * extension defines it; `failed` is for JSON-RPC errors, which a queued call never has.
 */
function taskStatus(record: CallRecord): 'working' | 'completed' | 'cancelled' {
  if (record.status === 'cancelled') return 'cancelled';
  return FINAL_STATUSES.has(record.status) ? 'completed' : 'working';
}

function resultOf(outcome: CallOutcome, registry: ToolRegistry): CallToolResult {
  return toResult({ kind: 'done', outcome }, registry.get(outcome.tool));
}

function callIdOf(response: CallResponse): string {
  return response.kind === 'done' ? response.outcome.id : response.id;
}

/** Whether a 2026 request declares the tasks extension among its client capabilities. */
function takesTasks(message: Message): boolean {
  const capabilities = meta(message)[CLIENT_CAPABILITIES_META_KEY];
  const extensions = isRecord(capabilities) ? capabilities['extensions'] : undefined;
  return isRecord(extensions) && TASKS_EXTENSION in extensions;
}

function meta(message: Message): Record<string, unknown> {
  const m = message.params['_meta'];
  return isRecord(m) ? m : {};
}

function asRequest(body: unknown): Message | undefined {
  if (!isRecord(body) || body['jsonrpc'] !== '2.0' || typeof body['method'] !== 'string') {
    return undefined;
  }
  const id = body['id'];
  if (typeof id !== 'string' && typeof id !== 'number') return undefined;
  const params = isRecord(body['params']) ? body['params'] : {};
  return { id, method: body['method'], params };
}

function ok(message: Message, result: Record<string, unknown>): JsonRpcAnswer {
  return { jsonrpc: '2.0', id: message.id, result };
}

function fail(message: Message, code: number, text: string, data?: unknown): JsonRpcAnswer {
  return {
    jsonrpc: '2.0',
    id: message.id,
    error: { code, message: text, ...(data === undefined ? {} : { data }) },
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A task request that cannot be served (the spec's invalid-params cases). */
class TaskError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TaskError';
  }
}
