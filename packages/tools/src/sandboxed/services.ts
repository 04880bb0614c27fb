/**
 * What the sandboxed tools need from the worker, added to ToolContext.services, and the
 * mapping of sandbox failures to tool errors the model can read.
 */
import { ToolError, type ToolContext } from '@toolgate/registry';
import { SandboxError, WorkspacePathError, type Sandbox, type Workspaces } from '@toolgate/sandbox';

declare module '@toolgate/registry' {
  interface ToolServices {
    sandbox: Sandbox;
    workspaces: Workspaces;
  }
}

export function sandboxServices(ctx: ToolContext): { sandbox: Sandbox; workspaces: Workspaces } {
  const { sandbox, workspaces } = ctx.services as Partial<ToolContext['services']>;
  if (!sandbox || !workspaces) {
    throw new ToolError('sandbox_error', 'this worker has no sandbox configured');
  }
  return { sandbox, workspaces };
}

/** SandboxError → ToolError `sandbox_error` (or `cancelled`); path errors → `invalid_path`. */
export function toToolError(err: unknown): unknown {
  if (err instanceof ToolError) return err;
  if (err instanceof WorkspacePathError)
    return new ToolError('invalid_path', err.message, { details: { reason: err.reason } });
  if (err instanceof SandboxError) {
    if (err.code === 'aborted')
      return new ToolError('cancelled', 'the call was cancelled and its sandbox killed', {
        cause: err,
      });
    return new ToolError('sandbox_error', err.message, {
      details: { reason: err.code },
      cause: err,
    });
  }
  return err;
}
