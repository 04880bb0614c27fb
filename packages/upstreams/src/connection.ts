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
import { raceAbort } from './abort.js';
import { unavailable } from './errors.js';
import type { StdioServer } from './stdio-server.js';
import { AnsweringTransport } from './answering-transport.js';
import {
  REPLY_CONNECTIONS,
  ServerRequests,
  isServerRequest,
  type CallRequests,
  type ReplySender,
  type ServerRequestLogger,
} from './server-requests.js';
import {
  HttpStatusError,
  JsonRpcFailure,
  OversizeError,
  postMessage,
  postRequest,
  type HttpSession,
  type ServerMessage,
} from './http-call.js';
import {
  STDIO_MAX_MESSAGE_BYTES,
  STDIO_OVERSIZE_ERROR,
  STDIO_SHARED_UNAVAILABLE,
} from './stdio-transport.js';

/** Largest response body read from an upstream (a call's result, one page of tools/list). */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
/** The `_meta` key that marks a call's request, so its log notifications find their call. */
export const CALL_META_KEY = 'io.toolgate/call';
/** How long a cancel's `notifications/cancelled` may take to send. */
const CANCEL_SEND_MS = 5000;
/**
 * The first MCP revision whose requests carry a `_meta` envelope and end by closing their stream
 * (the SDK's FIRST_MODERN_PROTOCOL_VERSION, not exported): a session on it or later is left to
 * the SDK's callTool; the lean POST speaks the revisions before it (what the SDK negotiates).
 */
const FIRST_MODERN_VERSION = '2026-07-28';

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
  /** The HTTP session `client` opened (its id and protocol version), for calls. */
  private transport: StreamableHTTPClientTransport | undefined;
  private connecting: Promise<Client> | undefined;
  private inFlight = 0;
  private readonly waiting: (() => void)[] = [];
  /**
   * Aborted when a listing's response passes MAX_RESPONSE_BYTES: the SDK swallows a failed
   * event stream, so the request would otherwise wait for its timeout.
   */
  private listTooLarge: AbortController | undefined;
  /** Ids of this process's requests on an HTTP session (the SDK's own are numbers). */
  private requestSeq = 0;
  private closed = false;
  /** The upstream's own requests on the HTTP session, answered within serverRequests. */
  private readonly requests: ServerRequests;
  /** Few sockets, their own: a server holding replies cannot take the calls' connections. */
  private replyFetch: GuardedFetch | undefined;

  constructor(
    readonly upstream: UpstreamConfig,
    private readonly fetchImpl: GuardedFetch,
    private readonly onToolsChanged?: () => void,
    /** A stdio upstream's server on this worker; its client serves every request. */
    private readonly stdio?: StdioServer,
    log?: ServerRequestLogger,
  ) {
    if (stdio && onToolsChanged) stdio.onToolsChanged = onToolsChanged;
    this.requests = new ServerRequests(upstream, log);
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
    this.listTooLarge = tooLarge;
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
      if (this.listTooLarge === tooLarge) this.listTooLarge = undefined;
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
    const signal = AbortSignal.any([hooks.signal, deadline]);
    const started = Date.now();
    await this.slot(hooks.signal);
    const stdio = this.stdio;
    stdio?.begin();
    if (hooks.onLog) stdio?.listen(callId, hooks.onLog);
    try {
      const client = await this.connect(signal);
      const meta = {
        [CALL_META_KEY]: callId,
        ...(hooks.traceparent ? { traceparent: hooks.traceparent } : {}),
      };
      const version = this.transport?.protocolVersion;
      if (!stdio && version !== undefined && version < FIRST_MODERN_VERSION) {
        try {
          return await this.post(name, args, meta, hooks, signal);
        } catch (err) {
          // 404 on a session: the upstream forgot it (it restarted), so the call did not run.
          // A new session, and the call once more.
          if (!(err instanceof HttpStatusError && err.status === 404 && client === this.client))
            throw err;
          this.drop();
          await this.connect(signal);
          return await this.post(name, args, meta, hooks, signal);
        }
      }
      return (await client.callTool(
        { name, arguments: args, _meta: meta },
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
      if (err instanceof OversizeError && !hooks.signal.aborted) {
        throw new ToolError(
          'output_limit',
          `upstream "${this.upstream.id}": ${name} answered with more than ${MAX_RESPONSE_BYTES} bytes`,
        );
      }
      if (deadline.aborted && !hooks.signal.aborted) throw this.timedOut(name, err);
      if (stdio && err instanceof ProtocolError && err.code === STDIO_OVERSIZE_ERROR) {
        // Skipped by the transport in place of the answer; the session goes on.
        throw new ToolError(
          'output_limit',
          `upstream "${this.upstream.id}": ${name} answered with more than ${STDIO_MAX_MESSAGE_BYTES} bytes`,
        );
      }
      throw this.failure(err, hooks.signal, name);
    } finally {
      stdio?.unlisten(callId);
      stdio?.end();
      this.release();
    }
  }

  /**
   * A call on the HTTP session: one POST, its progress and log notifications (its own event
   * stream, so surely this call's) to the hooks; an abort (cancel, deadline) sends
   * `notifications/cancelled` as the SDK would.
   */
  private async post(
    name: string,
    args: Record<string, unknown>,
    meta: Record<string, unknown>,
    hooks: CallHooks,
    signal: AbortSignal,
  ): Promise<CallToolResult> {
    const session = this.session();
    const id = `toolgate-${++this.requestSeq}`;
    const requests = this.requests.beginCall();
    const onAbort = () =>
      void postMessage(
        this.fetchImpl,
        session,
        {
          method: 'notifications/cancelled',
          params: {
            requestId: id,
            reason: String((signal.reason as Error)?.message ?? 'cancelled'),
          },
        },
        AbortSignal.timeout(CANCEL_SEND_MS),
      );
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const result = await postRequest(
        this.fetchImpl,
        session,
        {
          id,
          method: 'tools/call',
          params: {
            name,
            arguments: args,
            _meta: { ...meta, ...(hooks.onProgress ? { progressToken: id } : {}) },
          },
        },
        {
          signal,
          maxBytes: MAX_RESPONSE_BYTES,
          onMessage: (m) => this.onServerMessage(m, id, hooks, session, requests),
        },
      );
      return callResultOf(this.upstream, name, result);
    } finally {
      // The answer is in (or the call failed): replies still pending are of no use to it.
      this.requests.endCall(requests);
      signal.removeEventListener('abort', onAbort);
    }
  }

  private session(): HttpSession {
    return this.sessionOf(this.transport);
  }

  private sessionOf(transport: StreamableHTTPClientTransport | undefined): HttpSession {
    return {
      url: new URL(this.upstream.url!),
      headers: this.upstream.headers ?? {},
      ...(transport?.sessionId ? { sessionId: transport.sessionId } : {}),
      ...(transport?.protocolVersion ? { protocolVersion: transport.protocolVersion } : {}),
    };
  }

  private onServerMessage(
    m: ServerMessage,
    id: string,
    hooks: CallHooks,
    session: HttpSession,
    requests: CallRequests,
  ): void {
    const p = m.params ?? {};
    if (isServerRequest(m)) {
      // A request (sampling, elicitation, roots): toolgate's client declared none of them.
      this.requests.answer(m, this.replyTo(session), requests);
    } else if (m.method === 'notifications/progress' && p.progressToken === id) {
      if (typeof p.progress === 'number')
        hooks.onProgress?.(
          p.progress,
          typeof p.total === 'number' ? p.total : undefined,
          typeof p.message === 'string' ? p.message : undefined,
        );
    } else if (m.method === 'notifications/message') {
      const text = typeof p.data === 'string' ? p.data : JSON.stringify(p.data);
      hooks.onLog?.(typeof p.level === 'string' ? p.level : 'info', `${text}\n`);
    } else if (m.method === 'notifications/tools/list_changed') {
      this.onToolsChanged?.();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.requests.close();
    const client = this.client;
    this.client = undefined;
    await client?.close().catch(() => undefined);
    await this.replyFetch?.close();
  }

  /** Sends replies on `session` over the reply connections. */
  private replyTo(session: HttpSession): ReplySender {
    return (message, signal) => {
      this.replyFetch ??= this.fetchImpl.withConnectionLimit(REPLY_CONNECTIONS);
      return postMessage(this.replyFetch, session, message, signal);
    };
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
      if (this.client === client) {
        this.client = undefined;
        this.transport = undefined;
      }
    };
    client.onerror = () => undefined; // each request reports its own failure
    try {
      // The upstream's own requests (on the session's stream, a listing's) are answered by
      // this.requests, within its bounds, not one POST each by the SDK client.
      const answering = new AnsweringTransport(transport, (request) => {
        this.requests.answer(request, this.replyTo(this.sessionOf(transport)));
      });
      await client.connect(answering, { timeout: this.upstream.timeoutMs });
    } catch (err) {
      await client.close().catch(() => undefined);
      throw unavailable(this.upstream, `the MCP handshake failed: ${messageOf(err)}`, err);
    }
    if (this.closed) {
      await client.close().catch(() => undefined);
      throw unavailable(this.upstream, 'the connection is closed');
    }
    this.client = client;
    this.transport = transport;
    return client;
  }

  /**
   * The guarded fetch for the SDK's requests (handshake, listing), every response body capped
   * at MAX_RESPONSE_BYTES; a listing past it is given up at once.
   */
  private async tappedFetch(url: string | URL, init?: RequestInit): Promise<Response> {
    const response = await this.fetchImpl(url, init);
    if (!response.body) return response;
    const listing = typeof init?.body === 'string' && init.body.includes('"tools/list"');
    const body = response.body.pipeThrough(
      capped(MAX_RESPONSE_BYTES, () => {
        if (listing) this.listTooLarge?.abort();
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
    if (err instanceof ProtocolError || err instanceof JsonRpcFailure) {
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
    this.drop();
    return unavailable(this.upstream, message, err);
  }

  /** Forgets the session; the next request opens a new one. */
  private drop(): void {
    const client = this.client;
    this.client = undefined;
    this.transport = undefined;
    void client?.close().catch(() => undefined);
  }
  private timedOut(what: string, cause: unknown): ToolError {
    return unavailable(
      this.upstream,
      `${what} had no answer within ${this.upstream.timeoutMs} ms (timeoutMs)`,
      cause,
    );
  }
}

function messageOf(err: unknown): string {
  if (err instanceof ToolError) return err.message;
  const e = err as { message?: unknown; cause?: { message?: unknown } };
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const cause = typeof e?.cause?.message === 'string' ? `: ${e.cause.message}` : '';
  return `${message}${cause}`.slice(0, 500);
}

/** Passes bytes through up to `max`, then fails the stream. */
function capped(max: number, onOversize: () => void): TransformStream<Uint8Array, Uint8Array> {
  let bytes = 0;
  return new TransformStream({
    transform(chunk, controller) {
      bytes += chunk.byteLength;
      if (bytes > max) {
        onOversize();
        controller.error(new Error(`the upstream's response is larger than ${max} bytes`));
        return;
      }
      controller.enqueue(chunk);
    },
  });
}

/** A `tools/call` result as the SDK would give it, checked only for the shape toolgate reads. */
function callResultOf(upstream: UpstreamConfig, tool: string, result: unknown): CallToolResult {
  if (typeof result !== 'object' || result === null || Array.isArray(result)) {
    throw new ToolError(
      'upstream_error',
      `upstream "${upstream.id}": ${tool} answered with a result that is not an object`,
    );
  }
  const r = result as Record<string, unknown>;
  if (r.content !== undefined && !Array.isArray(r.content)) {
    throw new ToolError(
      'upstream_error',
      `upstream "${upstream.id}": ${tool} answered with content that is not a list`,
    );
  }
  return {
    ...r,
    content: (r.content as CallToolResult['content'] | undefined) ?? [],
  } as CallToolResult;
}
