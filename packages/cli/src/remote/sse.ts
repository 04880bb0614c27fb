/**
 * A Server-Sent Events reader on fetch: eventsource-parser does the wire format; this keeps the
 * connection, reconnecting when it drops with Last-Event-ID so no event is seen twice or lost.
 */
import { createParser } from 'eventsource-parser';
import { ExitError } from '../command.js';
import { apiErrorText, unreachable } from './api.js';
import type { Gateway } from './gateway.js';

export interface SseEvent {
  /** The event's type (`message` when the stream names none). */
  event: string;
  data: string;
  id?: string;
}

export interface SseOptions {
  /** Told before each reconnect (the stream ended or failed); a command may say so on stderr. */
  onReconnect?: (why: string) => void;
  /** First wait before a reconnect (doubled per failure up to 10 s; the server's `retry:` wins). */
  retryMs?: number;
}

const MAX_RETRY_MS = 10_000;

function aborted(err: unknown, signal: AbortSignal): boolean {
  return signal.aborted || (err as Error).name === 'AbortError';
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Reads `path`'s event stream until `signal` aborts (a command aborts it on the event that ends
 * its interest: a call's `outcome`, Ctrl-C). A stream the server ends, or a dropped connection,
 * is reopened with the last event id seen. The first connection failing (unreachable, 401, 404)
 * is an ExitError, as for api(); later failures (a gateway restart, 429 too_many_streams, 5xx)
 * are retried with backoff.
 */
export async function sse(
  gw: Gateway,
  path: string,
  onEvent: (event: SseEvent) => void,
  signal: AbortSignal,
  options: SseOptions = {},
): Promise<void> {
  const url = `${gw.url}${path}`;
  const firstRetryMs = options.retryMs ?? 500;
  let retryMs = firstRetryMs;
  let serverRetryMs: number | undefined;
  let lastEventId: string | undefined;
  let connected = false;
  while (!signal.aborted) {
    let why: string;
    try {
      const res = await fetch(url, {
        headers: {
          ...gw.headers,
          accept: 'text/event-stream',
          ...(lastEventId ? { 'last-event-id': lastEventId } : {}),
        },
        signal,
      });
      if (res.status !== 200 || !res.body) {
        const text = await res.text();
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // not JSON
        }
        const line = apiErrorText(res.status, body);
        // A refusal that waiting will not change: stop. Crowded or failing: try again.
        if (!connected || (res.status < 500 && res.status !== 429)) throw new ExitError(1, line);
        why = line;
      } else {
        connected = true;
        retryMs = firstRetryMs;
        const parser = createParser({
          onEvent(message) {
            if (message.id !== undefined) lastEventId = message.id;
            onEvent({
              event: message.event ?? 'message',
              data: message.data,
              ...(message.id !== undefined ? { id: message.id } : {}),
            });
          },
          onRetry(ms) {
            serverRetryMs = ms;
          },
        });
        const decoder = new TextDecoder();
        const reader = res.body.getReader();
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done || signal.aborted) break;
            parser.feed(decoder.decode(value, { stream: true }));
          }
        } finally {
          reader.cancel().catch(() => {});
        }
        why = 'the stream ended';
      }
    } catch (err) {
      if (err instanceof ExitError) throw err;
      if (aborted(err, signal)) return;
      if (!connected) throw new ExitError(1, unreachable(url, err));
      why = `the connection dropped (${(err as Error).message})`;
    }
    if (signal.aborted) return;
    options.onReconnect?.(why);
    await sleep(serverRetryMs ?? retryMs, signal);
    retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
  }
}
