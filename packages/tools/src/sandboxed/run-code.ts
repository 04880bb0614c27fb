/**
 * run_python and run_shell: the program runs in a throwaway sandbox with the client's workspace
 * at /workspace. A non-zero exit, a timeout or an output flood is a normal result (the model
 * reads stdout/stderr and tries again); only a failure of the sandbox itself is a ToolError.
 */
import { checkShellCommand, shellPolicyError } from '../policy/index.js';
import { Type, defineTool, spaceOf, type ToolContext } from '@toolgate/registry';
import type { RunRequest, RunResult } from '@toolgate/sandbox';
import { runWithTools } from '../code-mode/script.js';
import { sandboxServices, toToolError } from './services.js';
import {
  AttachmentSchema,
  OmittedAttachmentSchema,
  type Attachment,
  type OmittedAttachment,
} from './attachments.js';

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

const MAX_TIMEOUT_SECONDS = 300;

/** RunToolResult as a schema (run_python and run_shell). */
export const RunResultSchema = Type.Object(
  {
    stdout: Type.String(),
    stderr: Type.String({ description: "The program's stderr, then [sandbox] notes" }),
    exitCode: Type.Integer({ description: '137 when the sandbox killed it' }),
    timedOut: Type.Boolean(),
    truncated: Type.Boolean({ description: 'The output was cut at the output limit' }),
    attachments: Type.Optional(
      Type.Array(AttachmentSchema, {
        description: 'Rich outputs of a session call: matplotlib figures, display()',
      }),
    ),
    attachmentsOmitted: Type.Optional(
      Type.Array(OmittedAttachmentSchema, { description: 'Rich outputs over the limits' }),
    ),
  },
  { additionalProperties: false },
);

const timeoutSeconds = Type.Optional(
  Type.Integer({
    minimum: 1,
    maximum: MAX_TIMEOUT_SECONDS,
    description: 'Wall-clock limit in seconds (default 30). The program is killed when it passes.',
  }),
);

/** Shared by both tools: run argv in the image, fold the sandbox's verdicts into stderr. */
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

export const runPython = defineTool({
  name: 'run_python',
  description:
    'Run Python 3 code in a throwaway sandbox (numpy, pandas, requests available; no network). ' +
    'The working directory is the persistent workspace /workspace shared with the file tools; ' +
    'print what you want to see. Returns stdout, stderr, exitCode, timedOut, truncated.',
  category: 'code',
  parameters: Type.Object({
    code: Type.String({ minLength: 1, maxLength: 200_000, description: 'Python source to run' }),
    timeoutSeconds,
    tools: Type.Optional(
      Type.Boolean({
        description:
          'true: code mode, your tools are functions of the `toolgate` module (as run_code_with_tools)',
      }),
    ),
  }),
  result: RunResultSchema,
  sandbox: { image: 'python' },
  risk: 'sensitive',
  timeoutMs: (MAX_TIMEOUT_SECONDS + 30) * 1000,
  // -u: print() reaches the live output as it happens, not in 8 KiB blocks at the exit.
  handler: (args, ctx) =>
    args.tools
      ? runWithTools(ctx, args.code, args.timeoutSeconds)
      : runInWorkspace(ctx, 'python', ['python3', '-u', '-'], args.code, args.timeoutSeconds),
});

export const runShell = defineTool({
  name: 'run_shell',
  description:
    'Run a bash command line in a throwaway sandbox (coreutils, jq, git, curl, … ; no network). ' +
    'The working directory is the persistent workspace /workspace shared with the file tools. ' +
    'Returns stdout, stderr, exitCode, timedOut, truncated.',
  category: 'code',
  parameters: Type.Object({
    // ≤ 32 Ki characters keeps the argument under the kernel's 128 KiB per-argument limit.
    command: Type.String({ minLength: 1, maxLength: 32_768, description: 'bash command line' }),
    timeoutSeconds,
  }),
  result: RunResultSchema,
  sandbox: { image: 'shell' },
  risk: 'sensitive',
  timeoutMs: (MAX_TIMEOUT_SECONDS + 30) * 1000,
  // The command policy (policy.shell): on the gateway before queueing, in the worker before running.
  precheck: ({ command }, { services }) => {
    if (!services.shellPolicy) return;
    const verdict = checkShellCommand(command, services.shellPolicy);
    if (!verdict.ok) throw shellPolicyError(verdict);
  },
  handler: (args, ctx) => {
    return runInWorkspace(
      ctx,
      'shell',
      ['bash', '-c', args.command],
      undefined,
      args.timeoutSeconds,
    );
  },
});
