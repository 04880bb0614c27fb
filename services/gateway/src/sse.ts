import type { Response } from 'express';

/** A comment line every so often keeps proxies from closing a quiet event stream. */
const KEEP_ALIVE_MS = 15_000;
/** An event stream ends after this long whatever happens; the client may reconnect. */
const MAX_STREAM_MS = 3_600_000;

export interface EventStream {
  /** Writes one event (`data` as JSON; `id` when the event has one). */
  send(event: string, data: unknown, id?: number): void;
  /** Aborted when `held` aborts (the client went away, the gateway stops) or the stream is an hour old. */
  readonly signal: AbortSignal;
  /** Resolves when `signal` aborts. */
  readonly closed: Promise<void>;
  end(): void;
}

/**
 * Starts a Server-Sent Events answer (`text/event-stream`, no caching, no proxy buffering)
 * with a keep-alive comment and an hour's cap. `held` is the request's hold on its connection
 * (HeldConnections), which already hears the client and the gateway go away.
 */
export function openEventStream(res: Response, held: AbortSignal): EventStream {
  const stop = new AbortController();
  const abort = () => stop.abort();
  held.addEventListener('abort', abort, { once: true });
  if (held.aborted) abort();
  const lifetime = setTimeout(abort, MAX_STREAM_MS);
  if (!res.closed) {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
    });
    res.flushHeaders();
  }
  const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), KEEP_ALIVE_MS);
  const closed = new Promise<void>((resolve) => {
    if (stop.signal.aborted) resolve();
    else stop.signal.addEventListener('abort', () => resolve(), { once: true });
  });
  return {
    signal: stop.signal,
    closed,
    send(event, data, id) {
      if (res.writableEnded) return;
      res.write(`${id ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    },
    end() {
      held.removeEventListener('abort', abort);
      clearInterval(keepAlive);
      clearTimeout(lifetime);
      if (!res.writableEnded) res.end();
    },
  };
}
