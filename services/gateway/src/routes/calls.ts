import type { CallEvent, CallOutcome, CallRecord } from '@toolgate/calls';
import { Router, type Response } from 'express';
import { ApiError } from '../errors.js';
import { clientOf } from '../http.js';
import type { CallPipeline } from '../pipeline.js';

/** A comment line every so often keeps proxies from closing a quiet event stream. */
const KEEP_ALIVE_MS = 15_000;
/** An event stream ends after this long whatever the call does; the client may reconnect. */
const MAX_STREAM_MS = 3_600_000;

export interface CallRouteOptions {
  /** Event streams one client may hold open on this gateway (`calls.events.maxStreamsPerClient`). */
  maxStreamsPerClient: number;
  /** Aborted when the gateway stops: open event streams end (clients reconnect elsewhere). */
  shutdown: AbortSignal;
}

export function callRoutes(pipeline: CallPipeline, options: CallRouteOptions): Router {
  const router = Router();
  const streams = new Map<string, number>();

  router.get('/v1/calls/:id', async (req, res) => {
    res.json(callView(await pipeline.get(clientOf(res), req.params.id!)));
  });

  router.post('/v1/calls/:id/cancel', async (req, res) => {
    const record = await pipeline.cancel(clientOf(res), req.params.id!);
    // 202: the worker has been told but has not confirmed yet; GET the call to follow it.
    res.status(record.outcome ? 200 : 202).json(callView(record));
  });

  /**
   * Server-Sent Events: `status`, `output`, `progress`, then `outcome` (the call as GET
   * returns it), after which the stream ends. Event ids are the call's event sequence numbers.
   */
  router.get('/v1/calls/:id/events', async (req, res) => {
    const client = clientOf(res);
    const open = streams.get(client.id) ?? 0;
    if (open >= options.maxStreamsPerClient) {
      throw new ApiError(
        'too_many_streams',
        `client "${client.id}" already has ${open} event streams open on this gateway (its limit is ${options.maxStreamsPerClient})`,
        { headers: { 'Retry-After': '5' }, details: { limit: options.maxStreamsPerClient } },
      );
    }
    const lastEventId = Number(req.get('last-event-id') ?? 0);
    // Authorization and existence first, so a wrong id is a plain 404, not an empty stream.
    await pipeline.get(client, req.params.id!);
    streams.set(client.id, open + 1);
    const stop = new AbortController();
    res.on('close', () => stop.abort());
    const onShutdown = () => stop.abort();
    options.shutdown.addEventListener('abort', onShutdown, { once: true });
    const lifetime = setTimeout(() => stop.abort(), MAX_STREAM_MS);
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
    });
    res.flushHeaders();
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), KEEP_ALIVE_MS);
    try {
      await pipeline.watch(
        client,
        req.params.id!,
        (event) => writeEvent(res, event),
        stop.signal,
        Number.isSafeInteger(lastEventId) ? lastEventId : 0,
      );
    } catch (err) {
      // Headers are gone: say it in the stream rather than as an HTTP error.
      const error =
        err instanceof ApiError
          ? err.toBody().error
          : { code: 'internal', message: 'the event stream failed' };
      if (!res.writableEnded) res.write(`event: error\ndata: ${JSON.stringify(error)}\n\n`);
    } finally {
      options.shutdown.removeEventListener('abort', onShutdown);
      clearInterval(keepAlive);
      clearTimeout(lifetime);
      const left = (streams.get(client.id) ?? 1) - 1;
      if (left > 0) streams.set(client.id, left);
      else streams.delete(client.id);
      if (!res.writableEnded) res.end();
    }
  });
  return router;
}

function writeEvent(res: Response, event: CallEvent): void {
  if (res.writableEnded) return;
  const { type, seq, at, ...data } = event;
  const body = event.type === 'outcome' ? { ...outcomeView(event.outcome), at } : { ...data, at };
  // Status events of the stream's own making (seq 0) carry no id: they are not in the backlog.
  res.write(`${seq > 0 ? `id: ${seq}\n` : ''}event: ${type}\ndata: ${JSON.stringify(body)}\n\n`);
}

/** A call as the API shows it (GET /v1/calls/{id}, cancel, the events' outcome). */
export function callView(record: CallRecord) {
  return {
    id: record.id,
    tool: record.tool,
    status: record.status,
    createdAt: new Date(record.createdAt).toISOString(),
    ...(record.cancel ? { cancelledBy: record.cancel.by } : {}),
    ...(record.outcome ? outcomeFields(record.outcome) : {}),
  };
}

function outcomeView(outcome: CallOutcome) {
  return { id: outcome.id, tool: outcome.tool, status: outcome.status, ...outcomeFields(outcome) };
}

function outcomeFields(outcome: CallOutcome) {
  return {
    ...(outcome.status === 'ok' ? { result: outcome.result } : { error: outcome.error }),
    durationMs: outcome.durationMs,
    cached: outcome.cached,
    // The stored copy was cut to calls.maxResultBytes; the synchronous answer was whole.
    ...(outcome.resultTruncated ? { resultTruncated: outcome.resultTruncated } : {}),
  };
}
