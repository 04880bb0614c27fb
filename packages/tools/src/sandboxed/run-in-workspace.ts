/**
 * One program in a throwaway sandbox with the client's workspace at /workspace: what run_python,
 * run_shell and a code-mode script (code-mode/script.ts) share.
 */
import { spaceOf, type ToolContext } from '@toolgate/registry';
import type { RunRequest, RunResult } from '@toolgate/sandbox';
import type { Attachment, OmittedAttachment } from './attachments.js';
import { sandboxServices, toToolError } from './services.js';

export interface RunToolResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  timedOut: boolean;
  truncated: boolean;
  /** Rich outputs of a Python session's call (attachments.ts). */
  attachments?: Attachment[];
  attachmentsOmitted?: OmittedAttachment[];
}

/** Run argv in the image in the image, fold the sandbox's verdicts into stderr. */
export async function runInWorkspace(
  ctx: ToolContext,
  image: string,
  argv: string[],
  stdin: string | undefined,
  timeoutSecs: number | undefined,
  extra: Pick<RunRequest, 'channel'> = {},
): Promise<RunToolResult> {
  const { sandbox, workspaces } = sandboxServices(ctx);
  let result: RunResult;
  try {
    const workspace = await workspaces.ensure(spaceOf(ctx));
    result = await sandbox.run({
      image,
      argv,
      stdin,
      workspace,
      timeoutMs: timeoutSecs === undefined ? undefined : timeoutSecs * 1000,
      signal: ctx.signal,
      onOutput: (stream, text) => ctx.events?.output(stream, text),
      callId: ctx.callId,
      clientId: ctx.clientId,
      ...extra,
    });
  } catch (err) {
    throw toToolError(err);
  }
  return {
    stdout: result.stdout,
    stderr:
      result.stderr +
      verdict(
        result,
        sandbox.config.limits.memoryMb,
        timeoutSecs ?? sandbox.config.limits.timeoutMs / 1000,
      ),
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    truncated: result.truncated,
  };
}

/** A line the model can read when the sandbox, not the program, ended the run. */
function verdict(r: RunResult, memoryMb: number, seconds: number): string {
  const lines: string[] = [];
  if (r.timedOut) lines.push(`[sandbox] killed after ${seconds} s: wall-clock timeout`);
  if (r.oomKilled) lines.push(`[sandbox] killed: memory limit of ${memoryMb} MiB exceeded`);
  if (r.outputLimited) lines.push('[sandbox] killed: kept writing far past the output limit');
  else if (r.truncated) lines.push('[sandbox] output truncated at the output limit');
  if (lines.length === 0) return '';
  return (r.stderr && !r.stderr.endsWith('\n') ? '\n' : '') + lines.join('\n') + '\n';
}
