/**
 * Registry tools as MCP tools, and call responses as MCP tool results: the annotations,
 * output schemas and structured results a client reads (docs/mcp.md has the mapping).
 */
import type { CallOutcome } from '@toolgate/calls';
import type { Tool } from '@toolgate/registry';
import {
  ProtocolErrorCode,
  type CallToolResult,
  type Tool as McpTool,
} from '@modelcontextprotocol/server';
import { attachmentsOf } from '@toolgate/tools';
import { responseContent } from '../dialects/content.js';
import type { ApiError } from '../errors.js';
import type { CallResponse } from '../pipeline.js';

export function toMcpTool(tool: Tool, requiresApproval: (tool: Tool) => boolean): McpTool {
  const needsApproval = requiresApproval(tool);
  return {
    name: tool.name,
    title: titleOf(tool.name),
    description: tool.description,
    inputSchema: tool.parameters as McpTool['inputSchema'],
    ...(tool.result ? { outputSchema: outputSchemaOf(tool.result) } : {}),
    annotations: {
      // An upstream's own hints first (docs/upstreams.md); toolgate's word on approval last.
      ...tool.annotations,
      title: titleOf(tool.name),
      // "safe" is the registry's word for a tool that changes nothing; one an operator makes
      // wait for approval is treated as a writer whatever its risk says.
      readOnlyHint: tool.risk === 'safe' && !needsApproval,
      destructiveHint: needsApproval || tool.risk === 'destructive',
      idempotentHint: tool.annotations?.idempotentHint === true || tool.idempotent,
      // Reaches beyond toolgate: the HTTP tools, sandboxed tools given network access, and
      // an upstream's tools unless it says otherwise.
      openWorldHint:
        tool.category === 'web' ||
        tool.sandbox?.network === true ||
        (tool.annotations !== undefined && tool.annotations.openWorldHint !== false),
    },
  };
}

/** "run_shell" → "Run shell": what a client shows where it has room for a name. */
export function titleOf(name: string): string {
  const words = name.replace(/[_-]+/g, ' ').trim();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** Where a wrapped result sits in `structuredContent` (the key FastMCP uses). */
export const WRAPPED_RESULT_KEY = 'result';

/** MCP output schemas are object schemas: any other result schema is wrapped. */
function wrapsResult(schema: Record<string, unknown>): boolean {
  return schema['type'] !== 'object';
}

/**
 * A tool's `outputSchema`: its result schema when that is an object schema, else an object
 * with the result under `result`, as the Python SDK's FastMCP does for a function returning a
 * primitive. The root-only keywords (`$schema`, the definitions a `$ref` points into) stay at
 * the root, where they mean the same.
 */
export function outputSchemaOf(schema: Record<string, unknown>): McpTool['outputSchema'] {
  if (!wrapsResult(schema)) return schema as McpTool['outputSchema'];
  const { $schema, $defs, definitions, ...inner } = schema;
  return {
    type: 'object',
    ...($schema === undefined ? {} : { $schema }),
    properties: { [WRAPPED_RESULT_KEY]: inner },
    required: [WRAPPED_RESULT_KEY],
    additionalProperties: false,
    ...($defs === undefined ? {} : { $defs }),
    ...(definitions === undefined ? {} : { definitions }),
  } as McpTool['outputSchema'];
}

/**
 * The same texts the dialect bridge gives, so every assistant reads the same thing. `tool`
 * (the registry's, when it still exists) decides the structured form: object results as they
 * are, and a result whose schema is not an object wrapped as `{"result": …}`.
 */
export function toResult(response: CallResponse, tool: Tool | undefined): CallToolResult {
  const { text, isError } = responseContent(response);
  if (response.kind === 'accepted') {
    return {
      content: [{ type: 'text', text }],
      _meta: { 'toolgate/call': { id: response.id, status: response.status } },
    };
  }
  const { outcome } = response;
  const result = outcome.result ?? null;
  const wrapped = tool?.result !== undefined && wrapsResult(tool.result);
  // Object results go out structured too; for a tool with an outputSchema that is its result.
  // Rich outputs (a session's figures) go as image blocks, once: not in the structured copy.
  const images = isError ? [] : attachmentsOf(result).filter((a) => a.encoding === 'base64');
  const structured = isError
    ? {}
    : wrapped
      ? { structuredContent: { [WRAPPED_RESULT_KEY]: result } }
      : isRecord(result)
        ? { structuredContent: images.length > 0 ? withoutAttachments(result) : result }
        : {};
  return {
    content: [
      { type: 'text', text },
      ...images.map((a) => ({ type: 'image' as const, data: a.data, mimeType: a.mimeType })),
    ],
    ...(isError ? { isError: true } : {}),
    ...structured,
    _meta: { 'toolgate/call': callMeta(outcome) },
  };
}

function withoutAttachments(result: Record<string, unknown>): Record<string, unknown> {
  const { attachments: _attachments, ...rest } = result;
  return rest;
}

/** ApiError codes that are the model's to fix: a tool result it reads, not a protocol error. */
const TOOL_LEVEL_ERRORS = new Set([
  'invalid_arguments',
  'invalid_json',
  'invalid_request',
  'payload_too_large',
  'rate_limited',
  'loop_limit',
  'idempotency_mismatch',
  'too_many_in_flight',
  'budget_exhausted',
  // The deployment's policies: the model reads why and can try something else.
  'policy_denied',
  'policy_context_too_large',
]);

/**
 * A refused call as MCP has it: the model's mistakes are an isError result it reads; unknown
 * or forbidden tools are the client's (the tool was never listed), a JSON-RPC invalid-params
 * error as the spec has it; Redis or workers down, an internal error.
 */
export function refusal(
  err: ApiError,
): { result: CallToolResult } | { error: { code: number; message: string; data: unknown } } {
  if (TOOL_LEVEL_ERRORS.has(err.code)) {
    return { result: errorResult(err.code, err.message, err.details) };
  }
  const code =
    err.code === 'unknown_tool' || err.code === 'forbidden' || err.code === 'tool_quarantined'
      ? ProtocolErrorCode.InvalidParams
      : ProtocolErrorCode.InternalError;
  // What a client retries by: when (Retry-After), and for a shard's outage which shard it is.
  const retryAfter = err.headers['Retry-After'];
  const data = {
    code: err.code,
    ...(err.code === 'shard_unavailable' ? { details: err.details } : {}),
    ...(retryAfter === undefined ? {} : { retryAfterSeconds: Number(retryAfter) }),
  };
  return { error: { code, message: err.message, data } };
}

export function errorResult(code: string, message: string, details?: unknown): CallToolResult {
  const error = { code, message, ...(details === undefined ? {} : { details }) };
  return { content: [{ type: 'text', text: JSON.stringify({ error }) }], isError: true };
}

function callMeta(outcome: CallOutcome) {
  return {
    id: outcome.id,
    status: outcome.status,
    durationMs: outcome.durationMs,
    cached: outcome.cached,
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
