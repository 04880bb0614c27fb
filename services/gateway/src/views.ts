/**
 * What the routes answer, built in one place from the stored records and typed by
 * api-types.ts (the console's contract).
 */
import { redact, type CallOutcome, type CallRecord } from '@toolgate/calls';
import type { CallListItem, CallView, ExecuteAnswer, PendingApproval } from './api-types.js';

/** A call as `GET /v1/calls/{id}` shows it (and cancel, and the events' outcome). */
export function callView(record: CallRecord): CallView {
  const args = record.arguments ?? (record.job ? redact(record.job.args) : undefined);
  return {
    id: record.id,
    tool: record.tool,
    status: record.status,
    createdAt: new Date(record.createdAt).toISOString(),
    client: record.clientId,
    ...(args === undefined ? {} : { arguments: args }),
    ...(record.traceId ? { traceId: record.traceId } : {}),
    ...(record.cancel ? { cancelledBy: record.cancel.by } : {}),
    ...(record.approval ? { approval: record.approval } : {}),
    ...(record.outcome ? outcomeFields(record.outcome) : {}),
  };
}

/** A call's row in `GET /v1/calls`. */
export function callListItem(record: CallRecord): CallListItem {
  const error = record.outcome?.error?.code;
  return {
    id: record.id,
    tool: record.tool,
    client: record.clientId,
    status: record.status,
    createdAt: new Date(record.createdAt).toISOString(),
    ...(record.outcome
      ? { durationMs: record.outcome.durationMs, cached: record.outcome.cached }
      : {}),
    ...(error ? { errorCode: error } : {}),
  };
}

/** A finished call's outcome as the API shows it. */
export function outcomeView(outcome: CallOutcome): ExecuteAnswer {
  return { id: outcome.id, tool: outcome.tool, status: outcome.status, ...outcomeFields(outcome) };
}

function outcomeFields(outcome: CallOutcome) {
  return {
    ...(outcome.status === 'ok' ? { result: outcome.result } : { error: outcome.error! }),
    durationMs: outcome.durationMs,
    cached: outcome.cached,
    // The stored copy was cut to calls.maxResultBytes; the synchronous answer was whole.
    ...(outcome.resultTruncated ? { resultTruncated: outcome.resultTruncated } : {}),
  };
}

/** A parked call as `GET /v1/approvals` and the approvals' event stream show it. */
export function pendingApproval(record: CallRecord): PendingApproval {
  return {
    id: record.id,
    tool: record.tool,
    client: record.clientId,
    ...(record.job?.conversationId ? { conversationId: record.job.conversationId } : {}),
    arguments: redact(record.job?.args),
    createdAt: new Date(record.createdAt).toISOString(),
    expiresAt: new Date(record.expiresAt ?? 0).toISOString(),
  };
}
