// One HTTP request with a hard deadline, for the noisy-neighbour bench: both clients and the
// /healthz poller use it, so a blocked gateway shows up as a timeout instead of a hung bench.
import { request, type Agent, type IncomingHttpHeaders } from 'node:http';

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  ms: number;
}

/** A request that got no answer: past its deadline, refused at the socket, or cut short. */
export interface Failure {
  status: 'timeout' | 'error';
  ms: number;
  message: string;
}

export type Attempt = Reply | Failure;

export interface SendOptions {
  agent: Agent;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: Buffer | string;
  timeoutMs: number;
  /** Aborts the request (it then counts as an `error`). */
  signal?: AbortSignal;
}

export function isReply(a: Attempt): a is Reply {
  return typeof a.status === 'number';
}

export function send(url: string, o: SendOptions): Promise<Attempt> {
  const started = performance.now();
  const ms = () => performance.now() - started;
  return new Promise((resolve) => {
    let settled = false;
    const settle = (a: Attempt) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      o.signal?.removeEventListener('abort', onAbort);
      resolve(a);
    };
    // A Buffer goes out as it is: copying A's megabyte for every request would load this
    // machine's CPUs, not the gateway.
    const body = typeof o.body === 'string' ? Buffer.from(o.body) : o.body;
    const req = request(url, {
      agent: o.agent,
      method: o.method ?? 'GET',
      headers: {
        ...o.headers,
        ...(body ? { 'content-length': String(body.length) } : {}),
      },
    });
    // The deadline covers the whole exchange, not only socket idleness.
    const timer = setTimeout(() => {
      settle({ status: 'timeout', ms: ms(), message: `no answer within ${o.timeoutMs} ms` });
      req.destroy();
    }, o.timeoutMs);
    const onAbort = () => {
      settle({ status: 'error', ms: ms(), message: 'aborted' });
      req.destroy();
    };
    o.signal?.addEventListener('abort', onAbort, { once: true });
    req.on('error', (err) => settle({ status: 'error', ms: ms(), message: err.message }));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', (err) => settle({ status: 'error', ms: ms(), message: err.message }));
      res.on('end', () =>
        settle({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          ms: ms(),
        }),
      );
    });
    req.end(body);
  });
}

/** The `error.code` of an API error body, or the outcome's status/error code of a call. */
export function codeOf(reply: Reply): string {
  try {
    const parsed = JSON.parse(reply.body) as {
      error?: { code?: string };
      status?: string;
    };
    if (parsed.error?.code && reply.status >= 400) return parsed.error.code;
    if (parsed.status === 'error' && parsed.error?.code) return `error:${parsed.error.code}`;
    if (parsed.status) return parsed.status;
  } catch {
    // not JSON
  }
  return `http_${reply.status}`;
}

/** `code` plus the error's message (cut short), for showing why a call failed. */
export function describe(reply: Reply): string {
  let message: string | undefined;
  try {
    message = (JSON.parse(reply.body) as { error?: { message?: string } }).error?.message;
  } catch {
    // not JSON
  }
  const code = `${reply.status} ${codeOf(reply)}`;
  return message ? `${code} "${message.slice(0, 120)}"` : code;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
