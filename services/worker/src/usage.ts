/**
 * What a call used of the budgeted resources (docs/budgets.md), from what the worker saw of it:
 * charged with the call's end in its queue.
 */
import type { CallJob, CallOutcome, CallUsage, QueueKind } from '@toolgate/calls';
import type { Tool } from '@toolgate/registry';

/** The http tools (`web`): their result says the body bytes received. */
const HTTP_TOOLS = new Set(['http_get', 'http_post']);

/**
 * `ran`: the tool's handler was started (a call cancelled while it waited, or refused before
 * it ran, costs one call and nothing else).
 * - sandboxSeconds: a sandbox-queue call's run time on the worker (its sandbox run; for a
 *   session's call, the call's time in its long-lived sandbox).
 * - upstreamCalls: 1 for a call of an upstream MCP tool that ran.
 * - egressBytes: an http tool's body bytes, sent and received, plus what the call's meter
 *   measured (`measured`, taken once per call): the payload bytes the egress proxy relayed for
 *   its network-enabled sandbox, both ways.
 */
export function usageOf(
  call: CallJob,
  tool: Tool | undefined,
  kind: QueueKind,
  outcome: CallOutcome,
  ran: boolean,
  measured: { egressBytes: number } = { egressBytes: 0 },
): CallUsage {
  const usage: CallUsage = { calls: 1, sandboxMs: 0, upstreamCalls: 0, egressBytes: 0 };
  if (!ran || !tool) return usage;
  usage.egressBytes += measured.egressBytes;
  if (kind === 'sandbox') usage.sandboxMs = Math.max(0, Math.round(outcome.durationMs ?? 0));
  if (tool.category.startsWith('upstream:')) usage.upstreamCalls = 1;
  if (HTTP_TOOLS.has(tool.name)) {
    const args = call.args as { body?: unknown };
    if (typeof args.body === 'string') usage.egressBytes += Buffer.byteLength(args.body);
    const result = outcome.result as { bytes?: unknown } | undefined;
    if (typeof result?.bytes === 'number') usage.egressBytes += result.bytes;
  }
  return usage;
}
