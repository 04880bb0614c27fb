import type { CallStatus } from '@toolgate/calls';
import { Router, type Request } from 'express';
import type { CallList } from '../api-types.js';
import { MAX_USER_LENGTH } from '../auth/oauth.js';
import { ApiError } from '../errors.js';
import type { HeldConnections } from '../held-connections.js';
import { clientOf } from '../http.js';
import type { CallListQuery, CallPipeline } from '../pipeline.js';
import { openEventStream } from '../sse.js';
import { callListItem, callView, outcomeView } from '../views.js';

const STATUSES: readonly CallStatus[] = [
  'queued',
  'running',
  'ok',
  'error',
  'cancelled',
  'pending_approval',
  'rejected',
  'expired',
];
const MAX_LIST = 200;

export interface CallRouteOptions {
  /** The client's budget of held connections: each event stream holds one slot while open. */
  held: HeldConnections;
}

function param(req: Request, name: string): string | undefined {
  const v = req.query[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ApiError('invalid_request', `"${name}" must be given once`);
  return v;
}

/** The query of `GET /v1/calls`, checked (`invalid_request` otherwise). */
export function callListQuery(req: Request): CallListQuery {
  const status = param(req, 'status');
  if (status !== undefined && !STATUSES.includes(status as CallStatus)) {
    throw new ApiError('invalid_request', `"status" must be one of ${STATUSES.join(', ')}`);
  }
  const sinceText = param(req, 'since');
  const since = sinceText === undefined ? 0 : Date.parse(sinceText);
  if (Number.isNaN(since)) throw new ApiError('invalid_request', '"since" must be an ISO time');
  const limitText = param(req, 'limit') ?? '50';
  if (!/^\d+$/.test(limitText) || Number(limitText) < 1 || Number(limitText) > MAX_LIST) {
    throw new ApiError('invalid_request', `"limit" must be an integer from 1 to ${MAX_LIST}`);
  }
  const client = param(req, 'client');
  const tool = param(req, 'tool');
  const user = param(req, 'user');
  if (user !== undefined && (user.length === 0 || user.length > MAX_USER_LENGTH)) {
    throw new ApiError(
      'invalid_request',
      `"user" must be 1 to ${MAX_USER_LENGTH} characters (a token's user claim)`,
    );
  }
  return {
    since,
    limit: Number(limitText),
    ...(client ? { client } : {}),
    ...(user === undefined ? {} : { user }),
    ...(tool ? { tool } : {}),
    ...(status ? { status: status as CallStatus } : {}),
  };
}

export function callRoutes(pipeline: CallPipeline, options: CallRouteOptions): Router {
  const router = Router();

  /** `GET /v1/calls?client=&user=&tool=&status=&since=&limit=`: recent calls, newest first. */
  router.get('/v1/calls', async (req, res) => {
    const { calls, partial } = await pipeline.list(clientOf(res), callListQuery(req));
    const body: CallList = { calls: calls.map(callListItem), ...(partial ? { partial } : {}) };
    res.json(body);
  });

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
    // The slot first, before any await: a client that hangs up from here on is heard.
    const held = await options.held.hold(res, client);
    try {
      const lastEventId = Number(req.get('last-event-id') ?? 0);
      // Authorization and existence first, so a wrong id is a plain 404, not an empty stream.
      await pipeline.get(client, req.params.id!);
      if (held.signal.aborted) return;
      const stream = openEventStream(res, held.signal);
      try {
        await pipeline.watch(
          client,
          req.params.id!,
          ({ type, seq, at, ...data }) => {
            stream.send(
              type,
              'outcome' in data ? { ...outcomeView(data.outcome), at } : { ...data, at },
              // Status events of the stream's own making (seq 0) are not in the backlog: no id.
              seq > 0 ? seq : undefined,
            );
          },
          stream.signal,
          Number.isSafeInteger(lastEventId) ? lastEventId : 0,
        );
      } catch (err) {
        // Headers are gone: say it in the stream rather than as an HTTP error.
        const error =
          err instanceof ApiError
            ? err.toBody().error
            : { code: 'internal', message: 'the event stream failed' };
        stream.send('error', error);
      } finally {
        stream.end();
      }
    } finally {
      held.release();
    }
  });
  return router;
}
