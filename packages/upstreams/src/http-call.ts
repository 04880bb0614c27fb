/**
 * One JSON-RPC request to a Streamable HTTP upstream on the session the SDK client opened: a
 * POST through the guarded client's `request` (a Node stream, no WHATWG fetch/streams), its
 * answer read as JSON or as Server-Sent Events, notifications on the way handed to the call.
 *
 * The SDK's client keeps the handshake, the listing and the session's GET stream
 * (list_changed); only `tools/call`, a worker's hot path, comes here. Measured by
 * `pnpm bench:upstreams` (docs/upstreams.md): the SDK's `callTool` spent most of a call's CPU
 * in the WHATWG fetch and streams, and in validating with zod what toolgate validates again.
 */
import { createParser } from 'eventsource-parser';
import type { GuardedFetch } from '@toolgate/tools';

/** The session the SDK client negotiated: sent with every request on it. */
export interface HttpSession {
  url: URL;
  headers: Record<string, string>;
  sessionId?: string;
  protocolVersion?: string;
}

export interface JsonRpcError {
  code: number;
  message: string;
  data?: unknown;
}

/** A notification (or a request from the server) seen on the request's event stream. */
export interface ServerMessage {
  method: string;
  params?: Record<string, unknown>;
  id?: string | number;
}

export interface PostOptions {
  signal: AbortSignal;
  /** Largest body read; past it the request is given up with an OversizeError. */
  maxBytes: number;
  onMessage?: (message: ServerMessage) => void;
}

/** The upstream answered past `maxBytes`. */
export class OversizeError extends Error {}

/** An HTTP answer other than 2xx (404 on a session: the upstream forgot it). */
export class HttpStatusError extends Error {
  constructor(
    readonly status: number,
    text: string,
  ) {
    super(`the upstream answered HTTP ${status}${text ? `: ${text}` : ''}`);
  }
}

/** Characters of an error answer's body put into the message. */
const ERROR_BODY_CHARS = 300;
/** How long, and how many bytes, an event stream is read on after its answer, for its end. */
const AFTER_ANSWER_MS = 1000;
const AFTER_ANSWER_BYTES = 64 * 1024;

/**
 * Sends `message` (a request with `id`) and resolves with its response's `result`, or rejects
 * with its `error` as a JsonRpcFailure, an HttpStatusError, an OversizeError or the transport's
 * error. Resolves as soon as the response is read: an event stream's end (what a server sends
 * next) is read on in the background, for a while, so the kept-alive connection is reused.
 */
export async function postRequest(
  fetch: GuardedFetch,
  session: HttpSession,
  message: { id: string; method: string; params: Record<string, unknown> },
  options: PostOptions,
): Promise<unknown> {
  const response = await fetch.request(session.url, {
    method: 'POST',
    headers: headersOf(session),
    body: JSON.stringify({ jsonrpc: '2.0', ...message }),
    signal: options.signal,
  });
  const type = String(response.headers['content-type'] ?? '').toLowerCase();
  if (response.statusCode < 200 || response.statusCode >= 300) {
    const text = (await readAll(response.body, 64 * 1024).catch(() => Buffer.alloc(0)))
      .toString('utf8')
      .slice(0, ERROR_BODY_CHARS);
    throw new HttpStatusError(response.statusCode, text);
  }
  let answer: { result?: unknown; error?: JsonRpcError } | undefined;
  const take = (m: unknown) => {
    // Past the answer nothing on the stream concerns the request.
    if (answer || typeof m !== 'object' || m === null) return;
    const msg = m as { id?: unknown; method?: unknown; result?: unknown; error?: JsonRpcError };
    if (typeof msg.method === 'string') options.onMessage?.(msg as ServerMessage);
    else if (msg.id === message.id) answer = msg;
  };
  if (type.startsWith('text/event-stream')) {
    let bytes = 0;
    const decoder = new TextDecoder();
    const parser = createParser({
      onEvent: (event) => {
        if (event.event !== undefined && event.event !== 'message') return;
        try {
          take(JSON.parse(event.data));
        } catch {
          // not JSON: not a JSON-RPC message
        }
      },
    });
    const chunks = response.body[Symbol.asyncIterator]();
    while (!answer) {
      const next = await chunks.next();
      if (next.done) break;
      bytes += next.value.byteLength;
      if (bytes > options.maxBytes) {
        response.body.destroy();
        throw new OversizeError(`the upstream's response is larger than ${options.maxBytes} bytes`);
      }
      parser.feed(decoder.decode(next.value, { stream: true }));
    }
    // The answer is in: the call does not wait for a stream its server keeps open.
    if (answer) readOn(response.body, chunks);
  } else if (type.startsWith('application/json')) {
    const body = await readAll(response.body, options.maxBytes);
    const parsed = JSON.parse(body.toString('utf8')) as unknown;
    for (const m of Array.isArray(parsed) ? parsed : [parsed]) take(m);
  } else {
    response.body.destroy();
    throw new Error(`the upstream answered with content type "${type || 'none'}"`);
  }
  if (!answer)
    throw new Error(`the upstream's answer did not carry a response to ${message.method}`);
  if (answer.error) throw new JsonRpcFailure(answer.error);
  return answer.result;
}

/** A JSON-RPC error response: the upstream's own answer (unknown tool, invalid params). */
export class JsonRpcFailure extends Error {
  readonly code: number;
  constructor(error: JsonRpcError) {
    super(`MCP error ${error.code}: ${String(error.message)}`);
    this.code = error.code;
  }
}

/** Sends a notification or a response on the session, not waiting for any answer; never throws. */
export async function postMessage(
  fetch: GuardedFetch,
  session: HttpSession,
  message: Record<string, unknown>,
  signal: AbortSignal,
): Promise<void> {
  try {
    const response = await fetch.request(session.url, {
      method: 'POST',
      headers: headersOf(session),
      body: JSON.stringify({ jsonrpc: '2.0', ...message }),
      signal,
    });
    await readAll(response.body, 64 * 1024).catch(() => undefined);
  } catch {
    // best effort: the call it concerns has already ended for toolgate
  }
}

function headersOf(session: HttpSession): Record<string, string> {
  return {
    ...session.headers,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    ...(session.sessionId ? { 'mcp-session-id': session.sessionId } : {}),
    ...(session.protocolVersion ? { 'mcp-protocol-version': session.protocolVersion } : {}),
  };
}

/** Reads what follows an answer, to the stream's end or for a while; then lets it go. */
function readOn(body: { destroy(err?: Error): unknown }, chunks: AsyncIterator<Buffer>): void {
  const timer = setTimeout(() => body.destroy(), AFTER_ANSWER_MS);
  timer.unref();
  void (async () => {
    let bytes = 0;
    try {
      for (;;) {
        const next = await chunks.next();
        if (next.done) return;
        bytes += next.value.byteLength;
        if (bytes > AFTER_ANSWER_BYTES) {
          body.destroy();
          return;
        }
      }
    } catch {
      // destroyed, or the connection went: nothing waits for it
    } finally {
      clearTimeout(timer);
    }
  })();
}

async function readAll(
  body: AsyncIterable<Buffer> & { destroy(err?: Error): unknown },
  max: number,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of body) {
    bytes += chunk.byteLength;
    if (bytes > max) {
      body.destroy();
      throw new OversizeError(`the upstream's response is larger than ${max} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
