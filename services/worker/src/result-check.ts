/**
 * The worker's run-time check of a result against its tool's declared result schema. A result
 * that does not fit still goes to the caller unchanged (clients depend on what tools return
 * today; failing the call would turn a schema slip into an outage), but it is counted and
 * logged: MCP clients are promised the schema (outputSchema / structuredContent).
 */
import type { Logger } from '@toolgate/log';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import type { WorkerMetrics } from './metrics.js';

/** Checks one result of `tool`; never throws. */
export type ResultChecker = (tool: Tool, result: unknown, callId: string) => void;

/** One warning per tool per this many ms: a tool that always mismatches must not flood the log. */
export const MISMATCH_LOG_INTERVAL_MS = 60_000;

export function createResultChecker(
  registry: ToolRegistry,
  metrics: Pick<WorkerMetrics, 'resultMismatches'>,
  log: Logger,
): ResultChecker {
  const lastLogged = new Map<string, number>();
  return (tool, result, callId) => {
    if (!tool.result) return;
    let check;
    try {
      // Compiled at registration; stops at the first mismatch, and its patterns run on RE2
      // (linear; an upstream's within a work budget), so its cost is bounded by the result's
      // size, never by how wrong it is or by a hostile pattern.
      check = registry.checkResult(tool.name, result);
    } catch {
      return; // a tool this registry does not know (a test's hand-made Tool): nothing to check
    }
    if (check.ok) return;
    metrics.resultMismatches.inc({ tool: tool.name });
    const now = Date.now();
    if (now - (lastLogged.get(tool.name) ?? -Infinity) < MISMATCH_LOG_INTERVAL_MS) return;
    lastLogged.set(tool.name, now);
    log.warn(
      { tool: tool.name, callId, issue: check.issues[0] },
      'tool result does not match its result schema (returned as it is)',
    );
  };
}
