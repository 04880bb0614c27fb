/**
 * The worker's side of code mode (docs/code-mode.md): for each script, a capability in Redis
 * (client, user, token scopes and groups, parent call, calls remaining; expiring with the script) that stays in this process,
 * and the nested calls sent with it to a gateway (`codeMode.gatewayUrl`, any replica), where
 * they take the pipeline like a model's calls.
 */
import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { CodeModeCapabilities } from '@toolgate/calls';
import type { Logger } from '@toolgate/log';
import { injectContext } from '@toolgate/telemetry';
import type { CodeModeServices, CodeModeSession, NestedOutcome, ScriptTool } from '@toolgate/tools';

/** The capability outlives the script's own limit by this much (the call's teardown). */
const CAPABILITY_GRACE_SECONDS = 60;
/** A gateway answer larger than this is not read (results are capped far below it). */
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

/**
 * Kept-alive connections to the gateway: a nested call is on the script's critical path, and
 * node:http on a warm connection costs a fraction of fetch's per-request overhead.
 */
const httpAgent = new HttpAgent({ keepAlive: true, maxSockets: 256 });
const httpsAgent = new HttpsAgent({ keepAlive: true, maxSockets: 256 });

/** One request to the gateway: its status and JSON body. */
function gatewayRequest(
  url: string,
  init: { method: 'GET' | 'POST'; headers: Record<string, string>; body?: string },
  signal: AbortSignal,
): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const tls = url.startsWith('https:');
    const req = (tls ? httpsRequest : httpRequest)(
      url,
      {
        method: init.method,
        agent: tls ? httpsAgent : httpAgent,
        signal,
        headers: {
          ...init.headers,
          ...(init.body === undefined
            ? {}
            : { 'content-length': String(Buffer.byteLength(init.body)) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) return void req.destroy(new Error('answer too large'));
          chunks.push(chunk);
        });
        res.on('error', reject);
        res.on('end', () => {
          try {
            resolve({
              status: res.statusCode ?? 0,
              body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown,
            });
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        });
      },
    );
    req.on('error', reject);
    req.end(init.body);
  });
}

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
    user?: string;
    scopes?: readonly string[];
    groups?: readonly string[];
    timeoutMs: number;
    signal: AbortSignal;
  }): Promise<CodeModeSession> {
    const token = await this.o.capabilities.mint(
      {
        clientId: script.clientId,
        parentCallId: script.callId,
        ...(script.user === undefined ? {} : { user: script.user }),
        ...(script.scopes === undefined ? {} : { scopes: [...script.scopes] }),
        ...(script.groups === undefined ? {} : { groups: [...script.groups] }),
      },
      this.o.maxCalls,
      script.timeoutMs / 1000 + CAPABILITY_GRACE_SECONDS,
    );
    let tools: ScriptTool[];
    try {
      const res = await gatewayRequest(
        `${this.base}/v1/code-mode/tools`,
        { method: 'GET', headers: { authorization: `Bearer ${token}` } },
        script.signal,
      );
      if (res.status !== 200)
        throw new Error(`the gateway answered ${res.status} to the tool listing`);
      ({ tools } = res.body as { tools: ScriptTool[] });
    } catch (err) {
      await this.o.capabilities.revoke(token).catch(() => undefined);
      throw err;
    }
    const base = this.base;
    // Taken here, in the script's span: each nested call joins the script's trace.
    const trace = injectContext();
    const log = this.o.log;
    return {
      tools,
      call: async (tool, args, signal, idempotencyKey): Promise<NestedOutcome> => {
        try {
          const res = await gatewayRequest(
            `${base}/v1/code-mode/calls`,
            {
              method: 'POST',
              headers: {
                authorization: `Bearer ${token}`,
                'content-type': 'application/json',
                ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
                ...trace,
              },
              body: JSON.stringify({ tool, args }),
            },
            signal,
          );
          const body = res.body as NestedOutcome;
          // 4xx/5xx: the gateway refused it, with the error a model would read.
          if (res.status !== 200)
            return { status: 'error', error: body.error ?? httpError(res.status) };
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
