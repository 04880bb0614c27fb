/** Requests to the gateway's HTTP API, with its failures said in one line. */
import { ExitError, type CliIo } from '../command.js';
import type { Gateway } from './gateway.js';

export interface ApiAnswer {
  status: number;
  /** The JSON body, or the text when it is not JSON. */
  body: unknown;
  headers: Headers;
}

/** "cannot reach the gateway at …" with what fetch said. */
export function unreachable(url: string, err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const why = cause?.code ?? cause?.message ?? (err as Error).message;
  return `toolgate: cannot reach the gateway at ${new URL(url).origin} (${why}); give --gateway, set TOOLGATE_GATEWAY or \`toolgate login\``;
}

/** An API error answer ({error: {code, message}}) as one line, with a hint for 401. */
export function apiErrorText(status: number, body: unknown): string {
  const error = (body as { error?: { code?: string; message?: string } } | undefined)?.error;
  const line = error
    ? `toolgate: ${status} ${error.code ?? ''}: ${error.message ?? ''}`
    : `toolgate: HTTP ${status}: ${typeof body === 'string' ? body : JSON.stringify(body)}`;
  return status === 401
    ? `${line}\n  (give --key, set TOOLGATE_KEY or run \`toolgate login\`; \`toolgate keys new\` makes a key)`
    : line;
}

/**
 * One request. Any HTTP answer is returned; an unreachable gateway is an ExitError (exit 1,
 * one line). `body` is sent as JSON.
 */
export async function api(
  _io: CliIo,
  gw: Gateway,
  method: string,
  path: string,
  body?: unknown,
): Promise<ApiAnswer> {
  const url = `${gw.url}${path}`;
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      headers: {
        ...gw.headers,
        accept: 'application/json',
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch (err) {
    throw new ExitError(1, unreachable(url, err));
  }
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: kept as text
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** The answer when it is a success; else an ExitError (exit 1) with the API's error line. */
export function ok(answer: ApiAnswer): ApiAnswer {
  if (answer.status >= 200 && answer.status < 300) return answer;
  throw new ExitError(1, apiErrorText(answer.status, answer.body));
}

/** api() then ok(): the body of a successful answer. */
export async function apiOk<T = unknown>(
  io: CliIo,
  gw: Gateway,
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  return ok(await api(io, gw, method, path, body)).body as T;
}
