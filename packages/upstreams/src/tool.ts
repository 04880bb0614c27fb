/**
 * An upstream's tool definition as a toolgate tool: its schemas as the upstream gave them
 * (compiled leniently: foreign keywords are ignored, not refused), its answer read back into
 * a result or a ToolError (docs/upstreams.md says how).
 */
import type { CallToolResult, Tool as McpTool } from '@modelcontextprotocol/client';
import { upstreamToolName, type UpstreamConfig } from '@toolgate/config';
import { ToolError, type AnyToolSpec, type Risk, type ToolContext } from '@toolgate/registry';
import { injectContext } from '@toolgate/telemetry';
import { upstreamCalls } from './services.js';

/** The part of an upstream's error text given to the model. */
const ERROR_TEXT_MAX = 4096;
/** Time beyond `timeoutMs` before the worker's own timeout: the upstream's is the one heard. */
const TIMEOUT_GRACE_MS = 2000;

/** What the catalog keeps of a definition (the rest — icons, _meta, execution — is dropped). */
export interface UpstreamToolDefinition {
  name: string;
  title?: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  annotations?: Record<string, unknown>;
}

export function definitionOf(tool: McpTool): UpstreamToolDefinition {
  return {
    name: tool.name,
    ...(typeof tool.title === 'string' ? { title: tool.title } : {}),
    ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
    inputSchema: tool.inputSchema as Record<string, unknown>,
    ...(tool.outputSchema ? { outputSchema: tool.outputSchema as Record<string, unknown> } : {}),
    ...(tool.annotations ? { annotations: tool.annotations as Record<string, unknown> } : {}),
  };
}

/**
 * `approval:` entries name the upstream's tools (or `*` for all of them), compared by the
 * toolgate name each becomes: `create.issue` and `create_issue` are one tool to a model, so an
 * entry for one holds the other too (two tools that become one name are not served at all).
 */
export function needsApproval(upstream: UpstreamConfig, tool: string): boolean {
  if (upstream.approval.includes('*')) return true;
  const name = upstreamToolName(upstream.id, tool);
  return upstream.approval.some((entry) => upstreamToolName(upstream.id, entry) === name);
}

export function upstreamToolSpec(
  upstream: UpstreamConfig,
  def: UpstreamToolDefinition,
): AnyToolSpec {
  const hints = def.annotations ?? {};
  // The upstream's hints say how careful to be; they never lift toolgate's own policy.
  const risk: Risk =
    hints.destructiveHint === true
      ? 'destructive'
      : hints.readOnlyHint === true
        ? 'safe'
        : 'sensitive';
  return {
    name: upstreamToolName(upstream.id, def.name),
    description: def.description ?? def.title ?? '',
    category: `upstream:${upstream.id}`,
    parameters: def.inputSchema as AnyToolSpec['parameters'],
    ...(def.outputSchema ? { result: def.outputSchema as AnyToolSpec['result'] } : {}),
    risk,
    requiresApproval: needsApproval(upstream, def.name),
    timeoutMs: upstream.timeoutMs + TIMEOUT_GRACE_MS,
    cacheTtlSeconds: upstream.cacheTtlSeconds,
    // The upstream sees toolgate, not the client: whether its answer depends on who asks is
    // unknown, so a cached answer is given back only to the client it was made for.
    cacheScope: 'client',
    // A hint from a server toolgate does not control: a call is not run twice on its word.
    idempotent: false,
    foreignSchemas: true,
    ...(def.annotations ? { annotations: def.annotations } : {}),
    handler: async (args: unknown, ctx: ToolContext) => {
      const connection = upstreamCalls(ctx).connection(upstream.id);
      const traceparent = injectContext()?.traceparent;
      const result = await connection.call(def.name, args as Record<string, unknown>, ctx.callId, {
        signal: ctx.signal,
        ...(traceparent ? { traceparent } : {}),
        onProgress: (progress, total, message) => ctx.events?.progress(progress, total, message),
        onLog: (level, text) => ctx.events?.output('stderr', `[${level}] ${text}`),
      });
      return resultOf(upstream, def, result);
    },
  };
}

/**
 * The tool's result: `structuredContent` when the upstream gave it, the text when the content
 * is text only, else the content blocks as they are. `isError` is an `upstream_error`.
 */
export function resultOf(
  upstream: UpstreamConfig,
  def: UpstreamToolDefinition,
  result: CallToolResult,
): unknown {
  const content = Array.isArray(result.content) ? result.content : [];
  const texts = content.filter((c) => c.type === 'text').map((c) => (c as { text: string }).text);
  if (result.isError === true) {
    const text = texts.join('\n').slice(0, ERROR_TEXT_MAX) || 'the tool failed';
    throw new ToolError('upstream_error', `${upstream.id}/${def.name}: ${text}`);
  }
  if (result.structuredContent !== undefined) return result.structuredContent;
  if (texts.length === content.length) return texts.join('\n');
  return { content };
}
