/**
 * run_python and run_shell: the program runs in a throwaway sandbox with the client's workspace
 * at /workspace. A non-zero exit, a timeout or an output flood is a normal result (the model
 * reads stdout/stderr and tries again); only a failure of the sandbox itself is a ToolError.
 */
import { checkShellCommand, shellPolicyError } from '../policy/index.js';
import { Type, defineTool } from '@toolgate/registry';
import { runWithTools } from '../code-mode/script.js';
import { AttachmentSchema, OmittedAttachmentSchema } from './attachments.js';
import { runInWorkspace } from './run-in-workspace.js';

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
