/**
 * The worker's side of code mode (docs/code-mode.md): for each script, a capability in Redis
 * (client, parent call, calls remaining; expiring with the script) that stays in this process,
 * and the nested calls sent with it to a gateway (`codeMode.gatewayUrl`, any replica), where
 * they take the pipeline like a model's calls.
 */
import type { CodeModeCapabilities } from '@toolgate/calls';
import type { Logger } from '@toolgate/log';
import { injectContext } from '@toolgate/telemetry';
import type { CodeModeServices, CodeModeSession, NestedOutcome, ScriptTool } from '@toolgate/tools';

/** The capability outlives the script's own limit by this much (the call's teardown). */
const CAPABILITY_GRACE_SECONDS = 60;

export interface CodeModeBrokerOptions {
  capabilities: CodeModeCapabilities;
  /** The gateway's base URL; a function where it is known only later (tests, benches). */
  gatewayUrl: string | (() => string);
  maxCalls: number;
  maxResultBytes: number;
  log: Logger;
}

export class CodeModeBroker implements CodeModeServices {
  readonly maxResultBytes: number;

  constructor(private readonly o: CodeModeBrokerOptions) {
    this.maxResultBytes = o.maxResultBytes;
  }

  private get base(): string {
    const url = typeof this.o.gatewayUrl === 'function' ? this.o.gatewayUrl() : this.o.gatewayUrl;
    return url.replace(/\/+$/, '');
  }

  async open(script: {
    callId: string;
    clientId: string;
    timeoutMs: number;
    signal: AbortSignal;
  }): Promise<CodeModeSession> {
    const token = await this.o.capabilities.mint(
      { clientId: script.clientId, parentCallId: script.callId },
      this.o.maxCalls,
      script.timeoutMs / 1000 + CAPABILITY_GRACE_SECONDS,
    );
    let tools: ScriptTool[];
    try {
      const res = await fetch(`${this.base}/v1/code-mode/tools`, {
        headers: { authorization: `Bearer ${token}` },
        signal: script.signal,
      });
      if (!res.ok) throw new Error(`the gateway answered ${res.status} to the tool listing`);
      ({ tools } = (await res.json()) as { tools: ScriptTool[] });
    } catch (err) {
      await this.o.capabilities.revoke(token).catch(() => undefined);
      throw err;
    }
    let seq = 0;
    const base = this.base;
    const log = this.o.log;
    return {
      tools,
      call: async (tool, args, signal): Promise<NestedOutcome> => {
        // The n-th nested call of this script: a retry of the same request is answered the
        // first one's result (idempotency), never run twice.
        const key = `code-mode:${script.callId}:${++seq}`;
        try {
          const res = await fetch(`${base}/v1/code-mode/calls`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${token}`,
              'content-type': 'application/json',
              'idempotency-key': key,
              // The nested call's spans join the script's trace.
              ...injectContext(),
            },
            body: JSON.stringify({ tool, args }),
            signal,
          });
          const body = (await res.json()) as NestedOutcome & {
            error?: { code: string; message: string };
          };
          // 4xx/5xx: the gateway refused it, with the error a model would read.
          if (!res.ok) return { status: 'error', error: body.error ?? httpError(res.status) };
          return body;
        } catch (err) {
          if (signal.aborted)
            return {
              status: 'cancelled',
              error: { code: 'cancelled', message: 'the script ended' },
            };
          log.warn({ err, callId: script.callId, tool }, 'nested call failed to reach the gateway');
          return {
            status: 'error',
            error: { code: 'unavailable', message: 'the gateway could not be reached' },
          };
        }
      },
      close: () => this.o.capabilities.revoke(token).catch(() => undefined),
    };
  }
}

function httpError(status: number): { code: string; message: string } {
  return { code: 'unavailable', message: `the gateway answered HTTP ${status}` };
}
