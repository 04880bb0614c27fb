import { cancelledOutcome, type CallOutcome, type CallJob } from '@toolgate/calls';
import {
  ToolError,
  runPrecheck,
  type CallCredentials,
  type CallMeter,
  type Tool,
  type ToolEvents,
  type ToolServices,
} from '@toolgate/registry';
import type { ResultChecker } from './result-check.js';

/** Thrown inside runTool when the tool's own timeout passes. */
class Timeout extends Error {}

/** Thrown inside runTool when the call is cancelled; `by` who cancelled it. */
class Cancelled extends Error {
  constructor(readonly by: string) {
    super(`cancelled by ${by}`);
  }
}

export interface RunExtras {
  /** Aborted (reason: who cancelled) when the call is cancelled. */
  cancel?: AbortSignal;
  /** Where the tool's live output and progress go. */
  events?: ToolEvents;
  /** Compares an ok result with the tool's result schema (docs/tool-results.md). */
  checkResult?: ResultChecker;
  /** The credential rules as this call sees them (docs/credentials.md). */
  credentials?: CallCredentials;
  /** Where the tool reports what only it sees of its use (a network sandbox's egress bytes). */
  meter?: CallMeter;
}

/**
 * Runs one tool handler under its timeout. Every failure — a ToolError, any other exception,
 * a timeout — becomes an error outcome the model can read; nothing escapes.
 */
export async function runTool(
  tool: Tool,
  job: CallJob,
  services: ToolServices,
  shutdown: AbortSignal,
  { cancel, events, checkResult, credentials, meter }: RunExtras = {},
): Promise<CallOutcome> {
  const started = performance.now();
  const controller = new AbortController();
  const onShutdown = () => controller.abort(new Error('worker shutting down'));
  shutdown.addEventListener('abort', onShutdown, { once: true });
  let timer: NodeJS.Timeout | undefined;
  let onCancel: (() => void) | undefined;
  // The timeout and a cancel end the call now, whether or not the handler heeds its signal
  // (sandboxed tools do: their sandbox is killed).
  const stopped = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort(new Timeout());
      reject(new Timeout());
    }, tool.timeoutMs);
    onCancel = () => {
      const stop = new Cancelled(String(cancel?.reason ?? 'a client'));
      controller.abort(stop);
      reject(stop);
    };
    if (cancel?.aborted) onCancel();
    else cancel?.addEventListener('abort', onCancel, { once: true });
  });
  stopped.catch(() => undefined); // settled by the race below, or by nobody (precheck refused)
  const base = { id: job.id, tool: tool.name, cached: false };
  try {
    // The tool's own policy again: the job may come from anywhere (an approval, another gateway).
    const refused = runPrecheck(tool, job.args, { clientId: job.clientId, services });
    if (refused) throw refused;
    const result = await Promise.race([
      Promise.resolve().then(() =>
        tool.handler(job.args, {
          callId: job.id,
          clientId: job.clientId,
          ...(job.user === undefined ? {} : { user: job.user }),
          ...(job.scopes === undefined ? {} : { scopes: job.scopes }),
          ...(job.groups === undefined ? {} : { groups: job.groups }),
          ...(credentials ? { credentials } : {}),
          ...(job.space === undefined ? {} : { space: job.space }),
          signal: controller.signal,
          services,
          ...(events ? { events } : {}),
          ...(meter ? { meter } : {}),
        }),
      ),
      stopped,
    ]);
    checkResult?.(tool, result, job.id);
    return {
      ...base,
      status: 'ok',
      result: result === undefined ? null : result,
      durationMs: elapsed(started),
    };
  } catch (err) {
    if (err instanceof Cancelled) return cancelledOutcome(job, err.by, elapsed(started));
    return { ...base, status: 'error', error: describe(err, tool), durationMs: elapsed(started) };
  } finally {
    clearTimeout(timer);
    if (onCancel) cancel?.removeEventListener('abort', onCancel);
    shutdown.removeEventListener('abort', onShutdown);
  }
}

function describe(err: unknown, tool: Tool): CallOutcome['error'] {
  if (err instanceof Timeout) {
    return {
      code: 'timeout',
      message: `${tool.name} did not finish within ${tool.timeoutMs} ms and was stopped`,
    };
  }
  if (err instanceof ToolError) {
    return {
      code: err.code,
      message: err.message,
      ...(err.details === undefined ? {} : { details: err.details }),
    };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { code: 'tool_error', message: `${tool.name} failed: ${message}` };
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 100) / 100;
}
