/**
 * Which request headers a model may send and which response headers it gets back.
 * Request: hop-by-hop headers, `host`, framing (`content-length`, `transfer-encoding`, `expect`)
 * and `accept-encoding` are dropped — the client owns the connection and reads bodies as
 * identity. `authorization` and `cookie` are allowed (an assistant may call an API with a token
 * its user gave it) but are removed when a redirect leaves the origin.
 * Response: only an allowlist of descriptive headers; never `set-cookie`.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { ToolError } from '@toolgate/registry';

/** Dropped from every request (RFC 9110 §7.6.1 plus what the client itself controls). */
export const DROPPED_REQUEST_HEADERS: ReadonlySet<string> = new Set([
  'host',
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
  'content-length',
  'expect',
  'accept-encoding',
]);

/** Removed when a redirect goes to another origin. */
const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set(['authorization', 'cookie']);

/** Response headers a model may see. */
export const RESPONSE_HEADERS: ReadonlySet<string> = new Set([
  'content-type',
  'content-length',
  'content-language',
  'content-disposition',
  'content-encoding',
  'content-range',
  'accept-ranges',
  'last-modified',
  'etag',
  'cache-control',
  'expires',
  'age',
  'date',
  'location',
  'retry-after',
  'link',
  'allow',
  'vary',
  'www-authenticate',
]);
const RESPONSE_HEADER_PREFIXES = ['x-ratelimit-', 'ratelimit'];
const MAX_RESPONSE_HEADER_CHARS = 2048;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// Field values: visible ASCII, obs-text, space and tab; never CR, LF or NUL.
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/**
 * The headers to send, as lower-case [name, value] pairs: the caller's minus the dropped ones,
 * plus a User-Agent and, for a body without a content type, a guessed one.
 */
export function outgoingHeaders(
  input: Record<string, string>,
  options: { userAgent: string; body?: string },
): [string, string][] {
  const out: [string, string][] = [];
  // Headers named in Connection are hop-by-hop too.
  const connectionNamed = new Set<string>();
  for (const [name, value] of Object.entries(input)) {
    if (name.toLowerCase() === 'connection') {
      for (const n of value.split(',')) connectionNamed.add(n.trim().toLowerCase());
    }
  }
  for (const [rawName, value] of Object.entries(input)) {
    const name = rawName.toLowerCase();
    if (!TOKEN.test(name)) {
      throw new ToolError('invalid_headers', `"${rawName}" is not a valid header name`);
    }
    if (typeof value !== 'string' || !FIELD_VALUE.test(value)) {
      throw new ToolError(
        'invalid_headers',
        `the value of header "${rawName}" contains characters not allowed in HTTP headers (line breaks, control characters)`,
      );
    }
    if (DROPPED_REQUEST_HEADERS.has(name) || connectionNamed.has(name)) continue;
    out.push([name, value]);
  }
  const has = (n: string) => out.some(([name]) => name === n);
  if (!has('user-agent')) out.push(['user-agent', options.userAgent]);
  if (!has('accept')) out.push(['accept', '*/*']);
  out.push(['accept-encoding', 'identity']);
  if (options.body !== undefined && !has('content-type')) {
    out.push([
      'content-type',
      looksLikeJson(options.body) ? 'application/json' : 'text/plain; charset=utf-8',
    ]);
  }
  return out;
}

function looksLikeJson(body: string): boolean {
  const t = body.trimStart();
  if (!t.startsWith('{') && !t.startsWith('[')) return false;
  try {
    JSON.parse(body);
    return true;
  } catch {
    return false;
  }
}

export function stripCredentials(headers: [string, string][]): [string, string][] {
  return headers.filter(([name]) => !CREDENTIAL_HEADERS.has(name));
}

export function pickResponseHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (
      !RESPONSE_HEADERS.has(lower) &&
      !RESPONSE_HEADER_PREFIXES.some((p) => lower.startsWith(p))
    ) {
      continue;
    }
    const text = Array.isArray(value) ? value.join(', ') : value;
    out[lower] =
      text.length > MAX_RESPONSE_HEADER_CHARS
        ? `${text.slice(0, MAX_RESPONSE_HEADER_CHARS)}…`
        : text;
  }
  return out;
}
