/**
 * The console's only way to the gateway: same origin, the key from this tab's session storage
 * as a bearer header (never in a URL), errors as ApiError with the gateway's stable code.
 */
import type { ErrorAnswer } from '@toolgate/gateway';
import { readSse, type SseMessage } from './sse.js';

const KEY = 'toolgate.key';
/** The queue dashboard this tab handed the key to (its cookie goes on sign-out). */
const DASHBOARD = 'toolgate.queues';

export const session = {
  key: (): string | null => sessionStorage.getItem(KEY),
  signIn: (key: string) => sessionStorage.setItem(KEY, key),
  signOut: () => {
    sessionStorage.removeItem(KEY);
    const dashboard = sessionStorage.getItem(DASHBOARD);
    if (dashboard === null) return;
    sessionStorage.removeItem(DASHBOARD);
    fetch(`${dashboard}/sign-out`, { method: 'POST' }).catch(() => undefined);
  },
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** Called when the gateway no longer accepts the key (revoked, rotated): back to sign-in. */
let onUnauthorized: () => void = () => {};
export function whenUnauthorized(fn: () => void) {
  onUnauthorized = fn;
}

function headers(json: boolean, key = session.key()): HeadersInit {
  return {
    ...(key ? { authorization: `Bearer ${key}` } : {}),
    ...(json ? { 'content-type': 'application/json' } : {}),
  };
}

async function failure(res: Response): Promise<ApiError> {
  let body: Partial<ErrorAnswer> = {};
  try {
    body = (await res.json()) as ErrorAnswer;
  } catch {
    // not JSON: a proxy's page
  }
  const e = body.error;
  return new ApiError(
    res.status,
    e?.code ?? 'http_error',
    e?.message ?? res.statusText,
    e?.details,
  );
}

export interface Answer<T> {
  status: number;
  body: T;
}

/** One request; any status outside 2xx throws ApiError. */
export async function request<T>(
  path: string,
  init: { method?: string; json?: unknown; key?: string; signal?: AbortSignal } = {},
): Promise<Answer<T>> {
  const res = await fetch(path, {
    method: init.method ?? (init.json === undefined ? 'GET' : 'POST'),
    headers: headers(init.json !== undefined, init.key),
    ...(init.json === undefined ? {} : { body: JSON.stringify(init.json) }),
    ...(init.signal ? { signal: init.signal } : {}),
  });
  if (!res.ok) {
    const err = await failure(res);
    if (res.status === 401 && init.key === undefined) onUnauthorized();
    throw err;
  }
  return { status: res.status, body: (await res.json()) as T };
}

/** `DELETE path`, answered 204 (no body). */
export async function remove(path: string): Promise<void> {
  const res = await fetch(path, { method: 'DELETE', headers: headers(false) });
  if (!res.ok) {
    const err = await failure(res);
    if (res.status === 401) onUnauthorized();
    throw err;
  }
}

/**
 * Opens BullMQ's dashboard (`WhoAmI.queueDashboard`): a page of its own the browser loads
 * without this tab's key, so the key is first handed to it as an HttpOnly cookie.
 */
export async function openQueueDashboard(path: string): Promise<void> {
  const res = await fetch(`${path}/sign-in`, { method: 'POST', headers: headers(false) });
  if (!res.ok) throw await failure(res);
  sessionStorage.setItem(DASHBOARD, path);
  location.assign(`${path}/`);
}

export const get = async <T>(path: string, signal?: AbortSignal): Promise<T> =>
  (await request<T>(path, signal ? { signal } : {})).body;

/** `?a=1&b=2` from the defined values only. */
export function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/**
 * Follows an SSE route until `signal` aborts. `reconnect`: open it again after it ends or
 * fails (with a growing pause), for streams that are meant to stay open.
 */
export async function follow(
  path: string,
  onMessage: (m: SseMessage) => void,
  opts: { signal: AbortSignal; reconnect?: boolean; onState?: (live: boolean) => void },
): Promise<void> {
  let pause = 500;
  while (!opts.signal.aborted) {
    try {
      const res = await fetch(path, {
        headers: { ...headers(false), accept: 'text/event-stream' },
        signal: opts.signal,
      });
      if (!res.ok || !res.body) throw await failure(res);
      opts.onState?.(true);
      pause = 500;
      await readSse(res.body, onMessage);
    } catch (err) {
      if (opts.signal.aborted) return;
      if (err instanceof ApiError && err.status === 401) {
        onUnauthorized();
        return;
      }
      if (!opts.reconnect) throw err;
    }
    opts.onState?.(false);
    if (!opts.reconnect) return;
    await new Promise((r) => setTimeout(r, pause));
    pause = Math.min(pause * 2, 10_000);
  }
}
