/**
 * What code mode needs from the worker (ToolContext.services.codeMode): a session per script
 * that lists the client's tools and sends nested calls to the gateway under the script's
 * capability. The worker implements it (services/worker/src/code-mode.ts); the sandbox and the
 * script never see the capability.
 */
declare module '@toolgate/registry' {
  interface ToolServices {
    codeMode?: CodeModeServices;
  }
}

/** What the script's `toolgate` module is generated from: one tool the client may call. */
export interface ScriptTool {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

/** How a nested call ended, as the script sees it. */
export interface NestedOutcome {
  /** The nested call's id (absent when the gateway refused it before it had one). */
  id?: string;
  status: 'ok' | 'error' | 'cancelled';
  result?: unknown;
  error?: { code: string; message: string; details?: unknown };
}

export interface CodeModeSession {
  /** The tools the script's client may call, code mode itself aside. */
  readonly tools: readonly ScriptTool[];
  /**
   * One nested call through the gateway's pipeline; never throws (refusals are outcomes).
   * `idempotencyKey`: the script's own, under the client's idempotency rule.
   */
  call(
    tool: string,
    args: unknown,
    signal: AbortSignal,
    idempotencyKey?: string,
  ): Promise<NestedOutcome>;
  /** The script ended: its capability is revoked. */
  close(): Promise<void>;
}

export interface CodeModeServices {
  /** `codeMode.maxResultBytes`: bytes of results one script may receive in all. */
  readonly maxResultBytes: number;
  open(script: {
    callId: string;
    clientId: string;
    /** The user the script's call acts for, when one is known. */
    user?: string;
    /** The OAuth token's scopes the script's call was made with; absent for an API key. */
    scopes?: readonly string[];
    /** The token's groups, for the policies that decide its nested calls. */
    groups?: readonly string[];
    /** The script's wall-clock limit: the capability expires a little after it. */
    timeoutMs: number;
    signal: AbortSignal;
  }): Promise<CodeModeSession>;
}
