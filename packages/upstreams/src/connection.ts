/**
 * One SDK client per upstream per process, reused by every call: connected on first use,
 * dropped when the upstream closes or fails so the next call connects afresh (a stdio
 * upstream's client is its StdioServer's, which supervises the server's sandbox). Calls in flight
 * are bounded by the upstream's `concurrency`; every way a request fails becomes a ToolError
 * the model can read (`upstream_unavailable`, `upstream_error`).
 */
import {
  Client,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  StreamableHTTPClientTransport,
  type CallToolResult,
  type Tool as McpTool,
} from '@modelcontextprotocol/client';
import type { UpstreamConfig } from '@toolgate/config';
import { ToolError } from '@toolgate/registry';
import type { GuardedFetch } from '@toolgate/tools';
import type { StdioServer } from './stdio-server.js';
import {
  STDIO_MAX_MESSAGE_BYTES,
  STDIO_OVERSIZE_ERROR,
  STDIO_SHARED_UNAVAILABLE,
} from './stdio-transport.js';

/** Largest response body read from an upstream (a call's result, one page of tools/list). */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
/** The `_meta` key that marks a call's request, so its log notifications find their call. */
export const CALL_META_KEY = 'io.toolgate/call';
/** The `oversize` entry of the listing's request (calls use their ids). */
const LIST_KEY = '';

export interface CallHooks {
  signal: AbortSignal;
  /** W3C traceparent of the call's span, passed in `_meta`. */
  traceparent?: string;
  onProgress?: (progress: number, total?: number, message?: string) => void;
  /** A `notifications/message` the upstream sent on this call's stream. */
  onLog?: (level: string, text: string) => void;
}

export class UpstreamConnection {
  private client: Client | undefined;
  private connecting: Promise<Client> | undefined;
  private inFlight = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly logListeners = new Map<string, NonNullable<CallHooks['onLog']>>();
  /**
   * Aborted when the response of a request (a call, by its id; the listing, by LIST_KEY) passes
   * MAX_RESPONSE_BYTES: the SDK swallows a failed event stream, so the request would otherwise
   * wait for its timeout.
   */
  private readonly oversize = new Map<string, AbortController>();
  private closed = false;

  constructor(
    readonly upstream: UpstreamConfig,
    private readonly fetchImpl: GuardedFetch,
    private readonly onToolsChanged?: () => void,
    /** A stdio upstream's server on this worker; its client serves every request. */
    private readonly stdio?: StdioServer,
  ) {
    if (stdio && onToolsChanged) stdio.onToolsChanged = onToolsChanged;
  }

  /** Whether a session is open now (a listing connection keeps one for list_changed). */
  get connected(): boolean {
    return this.stdio ? this.stdio.running : this.client !== undefined;
  }

  /** One page of `tools/list`; `cursor` from the previous page. */
  async listPage(
    cursor: string | undefined,
    signal: AbortSignal,
  ): Promise<{ tools: McpTool[]; nextCursor?: string }> {
    const tooLarge = new AbortController();
    this.oversize.set(LIST_KEY, tooLarge);
    const both = AbortSignal.any([signal, tooLarge.signal]);
    try {
      const client = await this.connect(both);
      const page = await client.request(
        { method: 'tools/list', params: cursor === undefined ? {} : { cursor } },
        { signal: both, timeout: this.upstream.timeoutMs },
      );
      return page as { tools: McpTool[]; nextCursor?: string };
    } catch (err) {
      if (tooLarge.signal.aborted)
        throw new Error(`a tools/list answer passed ${MAX_RESPONSE_BYTES} bytes`);
      throw this.failure(err, signal, 'tools/list');
    } finally {
      this.oversize.delete(LIST_KEY);
    }
  }

  /** `tools/call` of the upstream's tool `name`; resolves with its result, isError included. */
  async call(
    name: string,
    args: Record<string, unknown>,
    callId: string,
    hooks: CallHooks,
  ): Promise<CallToolResult> {
    // One deadline for the whole call, handshake included: answered within timeoutMs.
    const deadline = AbortSignal.timeout(this.upstream.timeoutMs);
    const tooLarge = new AbortController();
    const signal = AbortSignal.any([hooks.signal, deadline, tooLarge.signal]);
    const started = Date.now();
    await this.slot(hooks.signal);
    this.stdio?.begin();
    if (hooks.onLog) this.logListeners.set(callId, hooks.onLog);
    if (hooks.onLog) this.stdio?.listen(callId, hooks.onLog);
    this.oversize.set(callId, tooLarge);
    try {
      const client = await this.connect(signal);
      return (await client.callTool(
        {
          name,
          arguments: args,
          _meta: {
            [CALL_META_KEY]: callId,
            ...(hooks.traceparent ? { traceparent: hooks.traceparent } : {}),
          },
        },
        {
          signal,
          timeout: Math.max(1, this.upstream.timeoutMs - (Date.now() - started)),
          ...(hooks.onProgress
            ? {
                onprogress: (p: { progress: number; total?: number; message?: string }) =>
                  hooks.onProgress?.(p.progress, p.total, p.message),
                resetTimeoutOnProgress: false,
              }
            : {}),
        },
      )) as CallToolResult;
    } catch (err) {
      if (tooLarge.signal.aborted && !hooks.signal.aborted) {
        throw new ToolError(
          'output_limit',
          `upstream "${this.upstream.id}": ${name} answered with more than ${MAX_RESPONSE_BYTES} bytes`,
        );
      }
      if (deadline.aborted && !hooks.signal.aborted) throw this.timedOut(name, err);
      if (this.stdio && err instanceof ProtocolError && err.code === STDIO_OVERSIZE_ERROR) {
        // Skipped by the transport in place of the answer; the session goes on.
        throw new ToolError(
          'output_limit',
          `upstream "${this.upstream.id}": ${name} answered with more than ${STDIO_MAX_MESSAGE_BYTES} bytes`,
        );
      }
      throw this.failure(err, hooks.signal, name);
    } finally {
      this.logListeners.delete(callId);
      this.stdio?.unlisten(callId);
      this.oversize.delete(callId);
      this.stdio?.end();
      this.release();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = undefined;
    await client?.close().catch(() => undefined);
  }

  /** Waits for one of `concurrency` slots (a cancelled call stops waiting). */
  private async slot(signal: AbortSignal): Promise<void> {
    if (this.inFlight < this.upstream.concurrency) {
      this.inFlight++;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const take = () => {
        signal.removeEventListener('abort', onAbort);
        this.inFlight++;
        resolve();
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(take);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(signal.reason as Error);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(take);
    });
  }

  private release(): void {
    this.inFlight--;
    this.waiting.shift()?.();
  }

  private connect(signal: AbortSignal): Promise<Client> {
    if (this.stdio) return this.stdio.connect(signal);
    if (this.client) return Promise.resolve(this.client);
    if (this.closed) return Promise.reject(unavailable(this.upstream, 'the connection is closed'));
    this.connecting ??= this.open().finally(() => (this.connecting = undefined));
    // A caller that gives up stops waiting; the handshake goes on for the next one.
    return raceAbort(this.connecting, signal);
  }

  private async open(): Promise<Client> {
    const transport = new StreamableHTTPClientTransport(new URL(this.upstream.url!), {
      fetch: (url, init) => this.tappedFetch(url, init),
      requestInit: { headers: this.upstream.headers },
      // A lost stream fails the call it carried; the next call connects again.
      reconnectionOptions: {
        maxRetries: 0,
        initialReconnectionDelay: 1000,
        maxReconnectionDelay: 1000,
        reconnectionDelayGrowFactor: 1,
      },
    });
    const client = new Client(
      { name: 'toolgate', version: '0.1.0' },
      {
        capabilities: {},
        ...(this.onToolsChanged
          ? {
              listChanged: {
                tools: { autoRefresh: false, onChanged: () => this.onToolsChanged?.() },
              },
            }
          : {}),
      },
    );
    client.onclose = () => {
      if (this.client === client) this.client = undefined;
    };
    client.onerror = () => undefined; // each request reports its own failure
    try {
      await client.connect(transport, { timeout: this.upstream.timeoutMs });
    } catch (err) {
      await client.close().catch(() => undefined);
      throw unavailable(this.upstream, `the MCP handshake failed: ${messageOf(err)}`, err);
    }
    if (this.closed) {
      await client.close().catch(() => undefined);
      throw unavailable(this.upstream, 'the connection is closed');
    }
    this.client = client;
    return client;
  }

  /**
   * The guarded fetch, with every response body capped at MAX_RESPONSE_BYTES and, for a
   * `tools/call` request that carries a call id, the `notifications/message` on its event
   * stream handed to that call (the SDK gives notifications without saying which request's
   * stream they came on).
   */
  private async tappedFetch(url: string | URL, init?: RequestInit): Promise<Response> {
    const response = await this.fetchImpl(url, init);
    if (!response.body) return response;
    const callId = callIdOf(init?.body);
    const onLog = callId === undefined ? undefined : this.logListeners.get(callId);
    const sse = response.headers.get('content-type')?.startsWith('text/event-stream') === true;
    const key =
      callId ??
      (typeof init?.body === 'string' && init.body.includes('"tools/list"') ? LIST_KEY : undefined);
    const body = response.body.pipeThrough(
      capped(MAX_RESPONSE_BYTES, sse && onLog ? onLog : undefined, () => {
        if (key !== undefined) this.oversize.get(key)?.abort();
      }),
    );
    return new Response(body, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  }

  private failure(err: unknown, signal: AbortSignal, what: string): unknown {
    if (signal.aborted) return signal.reason ?? err;
    if (err instanceof ToolError) return err;
    const message = messageOf(err);
    if (err instanceof SdkError && err.code === SdkErrorCode.RequestTimeout) {
      return this.timedOut(what, err);
    }
    // The host's owner of a shared stdio server could not take the request: its words.
    if (this.stdio && err instanceof ProtocolError && err.code === STDIO_SHARED_UNAVAILABLE) {
      return new ToolError('upstream_unavailable', err.message, { cause: err });
    }
    // A JSON-RPC error is the upstream's answer (unknown tool, invalid params): its words.
    if (err instanceof ProtocolError) {
      return new ToolError('upstream_error', `upstream "${this.upstream.id}": ${message}`, {
        cause: err,
      });
    }
    if (this.stdio && err instanceof SdkError && err.code === SdkErrorCode.ConnectionClosed) {
      // Its server supervises the sandbox: the next request starts it again (after backoff).
      return unavailable(
        this.upstream,
        `the stdio server ended during ${what}; it is started again on the next call`,
        err,
      );
    }
    // Anything else left the session unusable (connection lost, HTTP error): start over.
    const client = this.client;
    this.client = undefined;
    void client?.close().catch(() => undefined);
    return unavailable(this.upstream, message, err);
  }
  private timedOut(what: string, cause: unknown): ToolError {
    return unavailable(
      this.upstream,
      `${what} had no answer within ${this.upstream.timeoutMs} ms (timeoutMs)`,
      cause,
    );
  }
}

export function unavailable(upstream: UpstreamConfig, why: string, cause?: unknown): ToolError {
  return new ToolError(
    'upstream_unavailable',
    `upstream "${upstream.id}" is unavailable: ${why}`,
    cause === undefined ? {} : { cause },
  );
}

function messageOf(err: unknown): string {
  if (err instanceof ToolError) return err.message;
  const e = err as { message?: unknown; cause?: { message?: unknown } };
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const cause = typeof e?.cause?.message === 'string' ? `: ${e.cause.message}` : '';
  return `${message}${cause}`.slice(0, 500);
}

function callIdOf(body: unknown): string | undefined {
  if (typeof body !== 'string' || !body.includes(CALL_META_KEY)) return undefined;
  try {
    const message = JSON.parse(body) as {
      method?: string;
      params?: { _meta?: Record<string, unknown> };
    };
    const id = message.method === 'tools/call' ? message.params?._meta?.[CALL_META_KEY] : undefined;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Passes bytes through up to `max` (then fails the stream), and reads Server-Sent Events
 * lines on the side for log notifications when `onLog` is given.
 */
function capped(
  max: number,
  onLog: ((level: string, text: string) => void) | undefined,
  onOversize: () => void,
): TransformStream<Uint8Array, Uint8Array> {
  let bytes = 0;
  const decoder = new TextDecoder();
  let line = '';
  return new TransformStream({
    transform(chunk, controller) {
      bytes += chunk.byteLength;
      if (bytes > max) {
        onOversize();
        controller.error(new Error(`the upstream's response is larger than ${max} bytes`));
        return;
      }
      controller.enqueue(chunk);
      if (!onLog) return;
      line += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = line.indexOf('\n')) >= 0) {
        const text = line.slice(0, nl).replace(/\r$/, '');
        line = line.slice(nl + 1);
        if (text.startsWith('data:') && text.includes('notifications/message')) {
          logOf(text.slice(5).trim(), onLog);
        }
      }
    },
  });
}

function logOf(data: string, onLog: (level: string, text: string) => void): void {
  try {
    const m = JSON.parse(data) as { method?: string; params?: { level?: unknown; data?: unknown } };
    if (m.method !== 'notifications/message') return;
    const data_ = m.params?.data;
    const text = typeof data_ === 'string' ? data_ : JSON.stringify(data_);
    onLog(typeof m.params?.level === 'string' ? m.params.level : 'info', `${text}\n`);
  } catch {
    // not JSON: not ours to read
  }
}

export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e as Error);
      },
    );
  });
}
