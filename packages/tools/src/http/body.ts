/**
 * Turns response bytes into something a model can read: text when the content type says so
 * (or, without a telling type, when the bytes are valid UTF-8 without NULs), base64 otherwise.
 */
import { TextDecoder } from 'node:util';

const TEXT_TYPES = new Set([
  'application/json',
  'application/ld+json',
  'application/xml',
  'application/javascript',
  'application/ecmascript',
  'application/x-javascript',
  'application/x-www-form-urlencoded',
  'application/x-ndjson',
  'application/yaml',
  'application/x-yaml',
  'application/toml',
  'application/graphql',
  'application/sql',
  'application/csv',
]);

/** Media that is binary whatever its bytes look like. */
const BINARY_PREFIXES = ['image/', 'audio/', 'video/', 'font/'];

export interface DecodedBody {
  body: string;
  encoding: 'utf-8' | 'base64';
}

function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

function charsetOf(contentType: string | undefined): string {
  const m = /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(contentType ?? '');
  return m ? m[1]!.toLowerCase() : 'utf-8';
}

export function isTextType(type: string): boolean {
  return (
    type.startsWith('text/') ||
    TEXT_TYPES.has(type) ||
    type.endsWith('+json') ||
    type.endsWith('+xml')
  );
}

function sniffUtf8(bytes: Uint8Array, truncated: boolean): boolean {
  if (bytes.includes(0)) return false;
  try {
    // A cut at the size cap may split a character: streaming mode tolerates that at the end.
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: truncated });
    return true;
  } catch {
    return false;
  }
}

export function decodeBody(
  bytes: Uint8Array,
  contentType: string | undefined,
  truncated: boolean,
): DecodedBody {
  const type = mediaType(contentType);
  const text =
    isTextType(type) ||
    (!BINARY_PREFIXES.some((p) => type.startsWith(p)) && sniffUtf8(bytes, truncated));
  if (!text) return { body: Buffer.from(bytes).toString('base64'), encoding: 'base64' };
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(charsetOf(contentType));
  } catch {
    decoder = new TextDecoder('utf-8');
  }
  // stream: true on a truncated body drops a partial character at the cut instead of U+FFFD.
  return { body: decoder.decode(bytes, { stream: truncated }), encoding: 'utf-8' };
}
