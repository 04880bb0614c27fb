/**
 * What the routes answer, built in one place from the stored records and typed by
 * api-types.ts (the console's contract).
 */
import { redact, type CallBrief, type CallOutcome, type CallRecord } from '@toolgate/calls';
import type { CallListItem, CallView, ExecuteAnswer, PendingApproval } from './api-types.js';

/** A call as `GET /v1/calls/{id}` shows it (and cancel, and the events' outcome). */
export function callView(record: CallRecord): CallView {
  const args = record.arguments ?? (record.job ? redact(record.job.args) : undefined);
  const policy = record.policy ?? record.job?.policy;
  return {
    id: record.id,
    tool: record.tool,
    status: record.status,
    createdAt: new Date(record.createdAt).toISOString(),
    client: record.clientId,
    ...(record.user === undefined ? {} : { user: record.user }),
    ...(args === undefined ? {} : { arguments: args }),
    ...(record.traceId ? { traceId: record.traceId } : {}),
    ...(record.cancel ? { cancelledBy: record.cancel.by } : {}),
    ...(record.approval ? { approval: record.approval } : {}),
    ...(policy ? { policy } : {}),
    ...(record.outcome ? outcomeFields(record.outcome) : {}),
  };
}

/** A call's row in `GET /v1/calls` (from its brief: a listing never reads a result). */
export function callListItem(brief: CallBrief): CallListItem {
  return {
    id: brief.id,
    tool: brief.tool,
    client: brief.clientId,
    ...(brief.user === undefined ? {} : { user: brief.user }),
    status: brief.status,
    createdAt: new Date(brief.createdAt).toISOString(),
    ...(brief.durationMs === undefined ? {} : { durationMs: brief.durationMs }),
    ...(brief.cached === undefined ? {} : { cached: brief.cached }),
    ...(brief.errorCode ? { errorCode: brief.errorCode } : {}),
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

/**
 * A parked call as `GET /v1/approvals` and the approvals' event stream show it: from its brief,
 * so the arguments are a redacted preview (the whole call: `GET /v1/calls/{id}`).
 */
export function pendingApproval(brief: CallBrief): PendingApproval {
  return {
    id: brief.id,
    tool: brief.tool,
    client: brief.clientId,
    ...(brief.conversationId ? { conversationId: brief.conversationId } : {}),
    arguments: brief.arguments,
    createdAt: new Date(brief.createdAt).toISOString(),
    expiresAt: new Date(brief.expiresAt ?? 0).toISOString(),
  };
}
