/** Lifecycle of one tool call, as GET /v1/calls/{id} reports it. */
export type CallStatus =
  'queued' | 'running' | 'ok' | 'error' | 'cancelled' | 'pending_approval' | 'rejected' | 'expired';

/** Statuses a call never leaves. */
export const FINAL_STATUSES: ReadonlySet<CallStatus> = new Set([
  'ok',
  'error',
  'cancelled',
  'rejected',
  'expired',
]);

export interface CallError {
  code: string;
  message: string;
  details?: unknown;
}

/** What a finished call produced: the body of a 200 from execute. */
export interface CallOutcome {
  id: string;
  tool: string;
  /** `cancelled`: stopped by `POST /v1/calls/{id}/cancel` (error.code `cancelled`). */
  status: 'ok' | 'error' | 'cancelled';
  result?: unknown;
  error?: CallError;
  durationMs: number;
  cached: boolean;
  /**
   * Only on stored copies (GET /v1/calls/{id}, idempotent retries): the result and error were
   * cut to `calls.maxResultBytes` of JSON. The synchronous answer carried them whole.
   */
  resultTruncated?: { originalBytes: number; maxBytes: number };
}

/**
 * What `GET /v1/calls/{id}/events` streams (docs/http-api.md): the call's status changes, its
 * live output and progress, and last its outcome. `seq` counts from 1 per call, so a reader
 * that joins late and reads the backlog drops what it has already seen.
 */
export type CallEvent = { seq: number; at: number } & (
  | { type: 'status'; status: CallStatus }
  | { type: 'output'; stream: 'stdout' | 'stderr'; text: string }
  | { type: 'progress'; progress: number; total?: number; message?: string }
  | { type: 'outcome'; outcome: CallOutcome }
);

/** A queued job: one tool call, the data of its BullMQ job. The job's id is the call id. */
/** What the Cedar policies decided for a call, and the policies that decided (docs/policy.md). */
export interface PolicyVerdict {
  decision: 'allow' | 'deny' | 'approval';
  policies: string[];
}

export interface CallJob {
  id: string;
  tool: string;
  args: Record<string, unknown>;
  clientId: string;
  /** The user the client acts for (an OAuth token's user claim), when known. */
  user?: string;
  /**
   * Whose workspace and memory the call uses when not its client's: `<client>@<user>`
   * (`principal`) under `isolation: user`.
   */
  space?: string;
  conversationId?: string;
  /** Epoch ms at acceptance by the gateway. */
  acceptedAt: number;
  /**
   * Pub/sub channel of the gateway waiting for this call: the worker publishes the outcome
   * there at once, ahead of the job's completion event (which remains the fallback).
   */
  replyTo?: string;
  /** The admin who approved this call, for calls that needed approval. */
  approvedBy?: string;
  /** A nested call of a code-mode script: the script's call (docs/code-mode.md). */
  parentCallId?: string;
  /**
   * The OAuth token's scopes, on a call that starts code mode made with a token: the script's
   * nested calls get the same grant (docs/code-mode.md, identity). Absent: an API key's call.
   */
  scopes?: string[];
  /**
   * The token's groups (`policy.cedar.groupsClaim`), on a call that starts code mode made with
   * a token that has them: the script's nested calls are decided with the same groups.
   */
  groups?: string[];
  /** W3C trace context carriers, so the worker's spans join the gateway's trace. */
  trace?: Record<string, string>;
  /** The session the call runs in, and the worker hosting it (whose own queue takes it). */
  session?: { id: string; host: string };
  /** The Cedar policies' decision, with `policy.cedar`. */
  policy?: PolicyVerdict;
}

/** The durable record of a call, kept for `calls.ttlSeconds`. */
export interface CallRecord {
  id: string;
  tool: string;
  clientId: string;
  /** The user the client acted for (an OAuth token's user claim), when known. */
  user?: string;
  status: CallStatus;
  /** Which queue holds the job (for queued/running/ok/error). */
  queue: QueueKind;
  createdAt: number;
  outcome?: CallOutcome;
  /** Parked calls keep their job until an admin decides. */
  job?: CallJob;
  /** Epoch ms after which a pending approval expires. */
  expiresAt?: number;
  /** Who cancelled the call, for cancelled calls. */
  cancel?: { by: string; at: string };
  /** The arguments, redacted, cut to a preview (finished calls; parked ones keep their job). */
  arguments?: unknown;
  /** The W3C trace id of the call, when tracing was on. */
  traceId?: string;
  /** The Cedar policies' decision, with `policy.cedar`. */
  policy?: PolicyVerdict;
  approval?: {
    decision: 'approved' | 'rejected' | 'expired';
    by: string;
    at: string;
    reason?: string;
  };
}

export type QueueKind = 'fast' | 'sandbox';

/**
 * What listings show of a call (`GET /v1/calls`, `GET /v1/approvals`): short fields, stored
 * apart from the record (`Keys.callBrief`), so a listing never reads a result. At most
 * BRIEF_MAX_BYTES of JSON; a parked call's brief also carries what an approver sees.
 */
export interface CallBrief {
  id: string;
  tool: string;
  clientId: string;
  /** The user the client acted for, when known (whole: listings filter on it). */
  user?: string;
  status: CallStatus;
  createdAt: number;
  durationMs?: number;
  cached?: boolean;
  errorCode?: string;
  /** Parked calls: when the approval window ends (epoch ms). */
  expiresAt?: number;
  /** Parked calls. */
  conversationId?: string;
  /** Parked calls: the arguments, redacted, cut to a preview (ARGS_PREVIEW_CHARS). */
  arguments?: unknown;
}
