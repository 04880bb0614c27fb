/**
 * The HTTP client behind http_get and http_post: every hop (the first request and each
 * redirect) goes through the AddressGuard, connects only to the addresses it checked, and
 * the whole exchange is capped in time and response size.
 */
import { Client, errors as undiciErrors } from 'undici';
import { ToolError, type CallCredentials } from '@toolgate/registry';
import {
  AddressGuard,
  originOf,
  parseHttpUrl,
  pinnedLookup,
  systemLookup,
  type CheckedTarget,
  type LookupFunction,
} from './address-guard.js';
import { outgoingHeaders, pickResponseHeaders, stripCredentials } from './headers.js';
import { decodeBody } from './body.js';

/** `policy.http` from the config (docs/spec.md §2). */
export interface HttpPolicy {
  allowPrivateNetworks: boolean;
  allowHosts: readonly string[];
  maxResponseBytes: number;
  timeoutMs: number;
  maxRedirects: number;
}

export interface HttpRequest {
  method: 'GET' | 'POST';
  url: string;
  headers?: Record<string, string>;
  body?: string;
}

export interface HttpResult {
  status: number;
  statusText: string;
  /** The final URL, after redirects. */
  url: string;
  /** A safe subset of the response headers (content type, caching, location, rate limits…). */
  headers: Record<string, string>;
  /** Text, or base64 when the response is binary (see `encoding`). */
  body: string;
  encoding: 'utf-8' | 'base64';
  /** True when the body was cut at policy.http.maxResponseBytes. */
  truncated: boolean;
  /** Bytes of body received (at most maxResponseBytes). */
  bytes: number;
  /** Number of redirects followed. */
  redirects: number;
}

export interface HttpClientOptions {
  /** Name resolution; tests inject one. Defaults to the system resolver. */
  lookup?: LookupFunction;
  /** User-Agent sent when the caller gives none. */
  userAgent?: string;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
export const DEFAULT_USER_AGENT = 'toolgate-http/0.1';

class Deadline extends Error {}

export class SafeHttpClient {
  readonly policy: Readonly<HttpPolicy>;
  private readonly guard: AddressGuard;
  private readonly userAgent: string;

  constructor(policy: HttpPolicy, options: HttpClientOptions = {}) {
    this.policy = Object.freeze({ ...policy, allowHosts: [...policy.allowHosts] });
    this.guard = new AddressGuard(policy, options.lookup ?? systemLookup);
    this.userAgent = options.userAgent ?? DEFAULT_USER_AGENT;
  }

  /**
   * Sends `request`, following redirects by hand. Non-2xx statuses are results, not errors;
   * ToolErrors: invalid_url, invalid_headers, blocked_address, too_many_redirects, timeout,
   * cancelled, http_error.
   */
  async request(
    request: HttpRequest,
    signal?: AbortSignal,
    credentials?: CallCredentials,
  ): Promise<HttpResult> {
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(new Deadline()), this.policy.timeoutMs);
    const combined = signal ? AbortSignal.any([signal, deadline.signal]) : deadline.signal;
    try {
      return await this.follow(request, combined, credentials);
    } catch (err) {
      if (deadline.signal.aborted) {
        throw new ToolError(
          'timeout',
          `no complete response within ${this.policy.timeoutMs} ms (policy.http.timeoutMs)`,
          { cause: err },
        );
      }
      if (signal?.aborted) {
        throw new ToolError('cancelled', 'the request was cancelled', { cause: err });
      }
      throw toToolError(err);
    } finally {
      clearTimeout(timer);
    }
  }

  private async follow(
    request: HttpRequest,
    signal: AbortSignal,
    credentials: CallCredentials | undefined,
  ): Promise<HttpResult> {
    let url = parseHttpUrl(request.url);
    let method: string = request.method;
    let body = request.body;
    let headers = outgoingHeaders(request.headers ?? {}, {
      userAgent: this.userAgent,
      body,
    });
    for (let redirects = 0; ; redirects++) {
      const target = await this.guard.check(url, signal);
      // The operator's credential rules, per hop and only once the guard has passed the
      // destination: a redirect to another origin gets that origin's rules, never these (a
      // rule binds scheme and port too: https://api.test's secret never goes to http://api.test).
      const origin = originOf(target);
      const injected = credentials?.covers(origin) ? await credentials.headersFor(origin) : [];
      const hop = await this.send(target, method, withHeaders(headers, injected), body, signal);
      if (hop.kind === 'final') return { ...hop.result, redirects };

      if (redirects >= this.policy.maxRedirects) {
        throw new ToolError(
          'too_many_redirects',
          `stopped after ${redirects} redirect(s) (policy.http.maxRedirects = ${this.policy.maxRedirects}); ` +
            `the last one pointed to ${hop.location}`,
          { details: { redirects, location: hop.location, status: hop.status } },
        );
      }
      const next = parseHttpUrl(hop.location, url);
      // As browsers do: 303 (and 301/302 after a POST) turn into a GET without a body.
      if (hop.status === 303 || ((hop.status === 301 || hop.status === 302) && method === 'POST')) {
        method = 'GET';
        body = undefined;
        headers = headers.filter(([name]) => name !== 'content-type');
      }
      // Credentials given for one origin never travel to another.
      if (next.origin !== url.origin) headers = stripCredentials(headers);
      url = next;
    }
  }

  private async send(
    target: CheckedTarget,
    method: string,
    headers: [string, string][],
    body: string | undefined,
    signal: AbortSignal,
  ): Promise<
    | { kind: 'final'; result: Omit<HttpResult, 'redirects'> }
    | { kind: 'redirect'; status: number; location: string }
  > {
    const client = new Client(target.url.origin, {
      connect: { lookup: pinnedLookup(target), timeout: this.policy.timeoutMs },
      allowH2: false,
      pipelining: 0,
    });
    try {
      const res = await client.request({
        path: `${target.url.pathname}${target.url.search}`,
        method: method as 'GET',
        headers: headers.flat(),
        body: body ?? null,
        signal,
      });
      // Destroying the body early (redirect, size cap) makes undici emit an AbortError on it;
      // that is the intended end of the exchange, not a failure.
      res.body.on('error', () => undefined);
      const location = res.headers.location;
      if (REDIRECTS.has(res.statusCode) && typeof location === 'string' && location !== '') {
        res.body.destroy();
        return { kind: 'redirect', status: res.statusCode, location };
      }
      const max = this.policy.maxResponseBytes;
      const chunks: Buffer[] = [];
      let bytes = 0;
      let truncated = false;
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        if (bytes + chunk.length > max) {
          chunks.push(chunk.subarray(0, max - bytes));
          bytes = max;
          truncated = true;
          break; // ends the iteration and destroys the stream: nothing more is read
        }
        chunks.push(chunk);
        bytes += chunk.length;
      }
      const contentType = headerValue(res.headers['content-type']);
      const decoded = decodeBody(Buffer.concat(chunks, bytes), contentType, truncated);
      return {
        kind: 'final',
        result: {
          status: res.statusCode,
          statusText: res.statusText,
          url: target.url.href,
          headers: pickResponseHeaders(res.headers),
          body: decoded.body,
          encoding: decoded.encoding,
          truncated,
          bytes,
        },
      };
    } finally {
      await client.destroy().catch(() => undefined);
    }
  }
}

/** `headers` with `added` set: an added header replaces any the caller gave of that name. */
function withHeaders(headers: [string, string][], added: [string, string][]): [string, string][] {
  if (added.length === 0) return headers;
  const names = new Set(added.map(([name]) => name));
  return [...headers.filter(([name]) => !names.has(name)), ...added];
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(', ') : v;
}

function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { code?: unknown; cause?: unknown; errors?: unknown[] };
  if (typeof e.code === 'string') return e.code;
  if (Array.isArray(e.errors))
    for (const inner of e.errors) {
      const code = errorCode(inner);
      if (code) return code;
    }
  return e.cause ? errorCode(e.cause) : undefined;
}

const NETWORK_MESSAGES: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by the server',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  EPIPE: 'connection closed while sending',
  UND_ERR_SOCKET: 'the server closed the connection',
  HPE_INVALID_CONSTANT: 'the server did not answer with valid HTTP',
  ERR_TLS_CERT_ALTNAME_INVALID: 'the TLS certificate does not match the host name',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'the TLS certificate is self-signed',
  SELF_SIGNED_CERT_IN_CHAIN: 'the TLS certificate chain is self-signed',
  CERT_HAS_EXPIRED: 'the TLS certificate has expired',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'the TLS certificate cannot be verified',
};

/** Anything that is not yet a ToolError: a network failure (`http_error`) or a timeout. */
function toToolError(err: unknown): unknown {
  if (err instanceof ToolError) return err;
  if (
    err instanceof undiciErrors.ConnectTimeoutError ||
    err instanceof undiciErrors.HeadersTimeoutError ||
    err instanceof undiciErrors.BodyTimeoutError
  ) {
    return new ToolError('timeout', 'the server did not answer in time', { cause: err });
  }
  if (err instanceof undiciErrors.InvalidArgumentError) {
    return new ToolError('invalid_headers', `the request is invalid: ${err.message}`, {
      cause: err,
    });
  }
  const code = errorCode(err);
  const known = code ? NETWORK_MESSAGES[code] : undefined;
  const message = known ?? (err instanceof Error ? err.message : String(err));
  return new ToolError('http_error', `request failed: ${message}`, {
    details: code ? { code } : undefined,
    cause: err,
  });
}
