/**
 * A manifest as a tool: the handler runs the command in a throwaway sandbox with the
 * arguments as JSON on stdin, and reads stdout as the result.
 */
import { toToolError } from '@toolgate/tools';
import { ToolError, spaceOf, type AnyToolSpec, type ToolContext } from '@toolgate/registry';
import type { RunResult, Sandbox, Workspaces } from '@toolgate/sandbox';
import type { LoadedManifest } from './manifest.js';

/** Where the tool's files land inside the sandbox, and the command's working directory. */
export const TOOL_DIR = '/tmp/tool';

/**
 * Writes each (name, base64) pair under TOOL_DIR, then execs the command after `--`. POSIX sh
 * and base64 are in every sandbox image; nothing of the host is mounted for it.
 */
const PROLOGUE = [
  'set -e',
  `mkdir -p ${TOOL_DIR}`,
  `cd ${TOOL_DIR}`,
  'while [ "$1" != -- ]; do mkdir -p "$(dirname "$1")"; printf %s "$2" | base64 -d > "$1"; shift 2; done',
  'shift',
  'exec "$@"',
].join('\n');

const STDERR_TAIL = 2000;

export function manifestTool({ manifest: m, files }: LoadedManifest): AnyToolSpec {
  const command = typeof m.command === 'string' ? ['sh', '-c', m.command] : m.command;
  // Without files the command runs as it is (in /tmp): no shell in between.
  const argv =
    files.length === 0
      ? command
      : [
          'sh',
          '-c',
          PROLOGUE,
          m.name,
          ...files.flatMap((f) => [f.name, f.content.toString('base64')]),
          '--',
          ...command,
        ];
  return {
    name: m.name,
    description: m.description,
    category: m.category,
    parameters: m.parameters as AnyToolSpec['parameters'],
    ...(m.result ? { result: m.result as AnyToolSpec['result'] } : {}),
    sandbox: { image: m.image, ...(m.network ? { network: true } : {}) },
    ...(m.risk ? { risk: m.risk } : {}),
    ...(m.requiresApproval !== undefined ? { requiresApproval: m.requiresApproval } : {}),
    // The sandbox kills the program at timeoutSeconds; the call's own limit leaves room for
    // starting and removing the sandbox.
    timeoutMs: (m.timeoutSeconds + 30) * 1000,
    cacheTtlSeconds: m.cacheTtlSeconds,
    // A tool that reads the client's workspace answers from that client's files: a result
    // cached for one client must never answer another.
    cacheScope: m.workspace ? 'client' : 'global',
    idempotent: m.idempotent,
    handler: async (args: unknown, ctx: ToolContext) => {
      const { sandbox, workspaces } = ctx.services as {
        sandbox?: Sandbox;
        workspaces?: Workspaces;
      };
      if (!sandbox) throw new ToolError('sandbox_error', 'this worker has no sandbox configured');
      let result: RunResult;
      try {
        const workspace = m.workspace ? await workspaces?.ensure(spaceOf(ctx)) : undefined;
        if (m.workspace && !workspace) {
          throw new ToolError('sandbox_error', 'this worker has no workspaces configured');
        }
        result = await sandbox.run({
          image: m.image,
          argv,
          stdin: JSON.stringify(args),
          ...(workspace ? { workspace } : {}),
          timeoutMs: m.timeoutSeconds * 1000,
          network: m.network,
          ...(m.memoryMb ? { limits: { memoryMb: m.memoryMb } } : {}),
          signal: ctx.signal,
          onOutput: (stream, text) => ctx.events?.output(stream, text),
          callId: ctx.callId,
          clientId: ctx.clientId,
          // The proxy adds the rules' headers on the way out; the sandbox never holds a value.
          ...(m.network && ctx.credentials ? { credentials: ctx.credentials } : {}),
          // Charged to the call's egressBytes as it goes, however the call then ends.
          ...(m.network && ctx.meter ? { onEgress: (bytes) => ctx.meter?.addEgress(bytes) } : {}),
        });
      } catch (err) {
        throw toToolError(err);
      }
      return readResult(m.name, m.output, m.timeoutSeconds, result);
    },
  };
}

/** The program's verdict: its stdout as the result, or a ToolError the model can read. */
export function readResult(
  name: string,
  output: 'auto' | 'json' | 'text',
  timeoutSeconds: number,
  r: RunResult,
): unknown {
  if (r.timedOut) {
    throw new ToolError(
      'timeout',
      `${name} did not finish within ${timeoutSeconds} s and was killed`,
    );
  }
  if (r.oomKilled) throw new ToolError('out_of_memory', `${name} ran out of memory and was killed`);
  if (r.truncated || r.outputLimited) {
    throw new ToolError('output_limit', `${name} wrote more output than the sandbox keeps`);
  }
  const stdout = r.stdout.trim();
  if (r.exitCode !== 0) {
    // A program may fail with its own code: {"error":{"code","message"}} on stdout.
    const own = parseJson(stdout) as { error?: { code?: unknown; message?: unknown } } | undefined;
    if (typeof own?.error?.code === 'string' && typeof own.error.message === 'string') {
      throw new ToolError(own.error.code, own.error.message, { details: { exitCode: r.exitCode } });
    }
    const stderr = r.stderr.trim().slice(-STDERR_TAIL);
    throw new ToolError(
      'tool_error',
      `${name} failed (exit status ${r.exitCode})${stderr ? `: ${stderr}` : ''}`,
      { details: { exitCode: r.exitCode } },
    );
  }
  if (output === 'text') return r.stdout;
  const parsed = parseJson(stdout);
  if (parsed !== undefined) return parsed;
  if (output === 'json') {
    throw new ToolError('invalid_output', `${name} did not print JSON: ${stdout.slice(0, 200)}`);
  }
  return r.stdout;
}

function parseJson(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
