/** Runs one code-mode script: a session, the generated module, the sandbox with its channel. */
import { ToolError, type ToolContext } from '@toolgate/registry';
import { runInWorkspace, type RunToolResult } from '../sandboxed/run-in-workspace.js';
import { ScriptChannel } from './channel-server.js';
import { BOOTSTRAP, pythonModule } from './python-module.js';

/** The script's wall clock when the call names none (the sandbox's default is shorter). */
const DEFAULT_TIMEOUT_SECONDS = 30;

export async function runWithTools(
  ctx: ToolContext,
  code: string,
  timeoutSeconds: number | undefined,
): Promise<RunToolResult> {
  const codeMode = ctx.services.codeMode;
  if (!codeMode)
    throw new ToolError('code_mode_unavailable', 'this worker has no code mode configured');
  const session = await codeMode.open({
    callId: ctx.callId,
    clientId: ctx.clientId,
    // Who the script acts as: its nested calls are the caller's, not the bare client's.
    ...(ctx.user === undefined ? {} : { user: ctx.user }),
    ...(ctx.scopes === undefined ? {} : { scopes: ctx.scopes }),
    ...(ctx.groups === undefined ? {} : { groups: ctx.groups }),
    timeoutMs: (timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS) * 1000,
    signal: ctx.signal,
  });
  const channel = new ScriptChannel(session, codeMode.maxResultBytes, ctx.signal);
  try {
    const module = pythonModule(session.tools);
    const stdin = `${Buffer.byteLength(module)}\n${module}${code}`;
    return await runInWorkspace(
      ctx,
      'python',
      ['python3', '-u', '-c', BOOTSTRAP],
      stdin,
      timeoutSeconds,
      { channel: channel.handle },
    );
  } finally {
    channel.close();
    await session.close();
  }
}
