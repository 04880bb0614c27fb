import type { ValidationIssue } from '@toolgate/registry';

/** Stable error codes of the HTTP API (docs/http-api.md). */
export type ApiErrorCode =
  | 'unauthorized'
  | 'forbidden'
  | 'insufficient_scope'
  | 'tool_quarantined'
  | 'unknown_tool'
  | 'not_found'
  | 'session_not_found'
  | 'conflict'
  | 'idempotency_mismatch'
  | 'invalid_json'
  | 'invalid_request'
  | 'invalid_arguments'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'loop_limit'
  | 'too_many_in_flight'
  | 'too_many_streams'
  | 'too_many_pending_approvals'
  | 'budget_exhausted'
  | 'invalid_secret_name'
  | 'invalid_secret_value'
  | 'too_many_secrets'
  | 'secrets_disabled'
  | 'too_many_sessions'
  | 'approval_required'
  | 'policy_denied'
  | 'policy_context_too_large'
  | 'self_approval'
  | 'code_mode_max_calls'
  | 'code_mode_depth'
  | 'code_mode_sandbox_slot'
  | 'unavailable'
  | 'shard_unavailable'
  | 'client_moving'
  | 'internal';

const STATUS: Record<ApiErrorCode, number> = {
  unauthorized: 401,
  forbidden: 403,
  insufficient_scope: 403,
  tool_quarantined: 403,
  unknown_tool: 404,
  not_found: 404,
  session_not_found: 404,
  conflict: 409,
  idempotency_mismatch: 422,
  invalid_json: 400,
  invalid_request: 400,
  invalid_arguments: 400,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  loop_limit: 429,
  too_many_in_flight: 429,
  too_many_streams: 429,
  too_many_pending_approvals: 429,
  budget_exhausted: 429,
  invalid_secret_name: 400,
  invalid_secret_value: 400,
  too_many_secrets: 409,
  secrets_disabled: 503,
  too_many_sessions: 429,
  approval_required: 403,
  policy_denied: 403,
  policy_context_too_large: 413,
  self_approval: 403,
  code_mode_max_calls: 429,
  code_mode_depth: 400,
  code_mode_sandbox_slot: 409,
  unavailable: 503,
  shard_unavailable: 503,
  client_moving: 503,
  internal: 500,
};

/** An error answered to the API client as `{"error":{"code","message","details?"}}`. */
export class ApiError extends Error {
  readonly code: ApiErrorCode;
  readonly status: number;
  readonly details: unknown;
  readonly headers: Record<string, string>;

  constructor(
    code: ApiErrorCode,
    message: string,
    options: { details?: unknown; cause?: unknown; headers?: Record<string, string> } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = 'ApiError';
    this.code = code;
    this.status = STATUS[code];
    this.details = options.details;
    this.headers = options.headers ?? {};
  }

  toBody(): { error: { code: string; message: string; details?: unknown } } {
    return {
      error: {
        code: this.code,
        message: this.message,
        ...(this.details === undefined ? {} : { details: this.details }),
      },
    };
  }

  static invalidArguments(tool: string, issues: ValidationIssue[]): ApiError {
    const summary = issues
      .slice(0, 3)
      .map(
        (i) =>
          `${i.path} ${i.message}${i.keyword === 'additionalProperties' ? ` (${String(i.params.additionalProperty)})` : ''}`,
      )
      .join('; ');
    return new ApiError(
      'invalid_arguments',
      `arguments for ${tool} do not match its schema: ${summary}`,
      {
        details: issues,
      },
    );
  }
}
