import type { Approvals, AuditLog, AuditQuery, WorkspaceResets } from '@toolgate/calls';
import { isCallId, principal } from '@toolgate/calls';
import { Router, type Request } from 'express';
import { MAX_USER_LENGTH } from '../auth/oauth.js';
import { actorOf } from '../clients.js';
import { ApiError } from '../errors.js';
import { clientOf, objectBody, requireAdmin } from '../http.js';
import type { GatewayMetrics } from '../metrics.js';
import { guardRedis, type CallPipeline } from '../pipeline.js';
import type { ApprovalFeed } from '../approval-feed.js';
import type { HeldConnections } from '../held-connections.js';
import { openEventStream } from '../sse.js';
import { pendingApproval } from '../views.js';
import type { ApprovalEvent, PendingCount } from '../api-types.js';
import type { RedisClient } from '@toolgate/calls';

function intParam(req: Request, name: string, fallback: number, max: number): number {
  const v = req.query[name];
  if (v === undefined) return fallback;
  if (typeof v !== 'string' || !/^\d+$/.test(v) || Number(v) < 1 || Number(v) > max) {
    throw new ApiError('invalid_request', `"${name}" must be an integer from 1 to ${max}`);
  }
  return Number(v);
}

function stringParam(req: Request, name: string): string | undefined {
  const v = req.query[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ApiError('invalid_request', `"${name}" must be given once`);
  return v;
}

/** The query of `GET /v1/audit`, checked (`invalid_request` otherwise). */
export function auditQuery(req: Request): AuditQuery {
  const event = stringParam(req, 'event');
  if (
    event !== undefined &&
    ![
      'call',
      'refused',
      'approval',
      'cancel',
      'upstream',
      'secret',
      'session',
      'workspace',
    ].includes(event)
  ) {
    throw new ApiError(
      'invalid_request',
      '"event" must be call, refused, approval, cancel, upstream, secret, session or workspace',
    );
  }
  const callId = stringParam(req, 'callId');
  if (callId !== undefined && !isCallId(callId)) {
    throw new ApiError('invalid_request', '"callId" must be a call id');
  }
  return {
    limit: intParam(req, 'limit', 100, 1000),
    ...(stringParam(req, 'client') ? { client: stringParam(req, 'client')! } : {}),
    ...(stringParam(req, 'tool') ? { tool: stringParam(req, 'tool')! } : {}),
    ...(event ? { event: event as AuditQuery['event'] } : {}),
    ...(callId ? { callId } : {}),
  };
}

/** Admin-only: human approval of parked calls, and the audit log. */
export function adminRoutes(deps: {
  redis: RedisClient;
  approvals: Approvals;
  audit: AuditLog;
  pipeline: CallPipeline;
  metrics: GatewayMetrics;
  feed: ApprovalFeed;
  /** Each configured client's `limits.pendingApprovals`. */
  pendingLimits: ReadonlyMap<string, number>;
  /** The client's budget of held connections: the approvals feed holds one slot while open. */
  held: HeldConnections;
}): Router {
  const { redis, approvals, audit, pipeline, metrics, feed } = deps;
  const router = Router();
  router.use(['/v1/approvals', '/v1/audit'], requireAdmin);

  const clientIds = [...deps.pendingLimits.keys()];
  // Every configured client, none pending included: the console counts parked events against
  // these limits.
  const countsOf = (byClient: Record<string, number>): Record<string, PendingCount> =>
    Object.fromEntries(
      [...deps.pendingLimits].map(([c, limit]) => [c, { pending: byClient[c] ?? 0, limit }]),
    );

  /** The oldest PENDING_LISTED pending calls (each a brief: arguments as a preview). */
  router.get('/v1/approvals', async (_req, res) => {
    const { pending } = await guardRedis(() => approvals.pending(clientIds), redis);
    res.json(pending.map(pendingApproval));
  });

  /**
   * Server-Sent Events for the console: `snapshot` (the pending calls), then `parked`,
   * `decided`, `expired` and `cancelled` as they happen on any gateway (through Redis).
   */
  router.get('/v1/approvals/events', async (_req, res) => {
    // The slot first, before any await: a console that closes from here on is heard.
    const held = await deps.held.hold(res, clientOf(res));
    try {
      if (held.signal.aborted) return;
      const stream = openEventStream(res, held.signal);
      try {
        const stop = await feed.subscribe((event) => stream.send(event.type, event));
        try {
          const list = await guardRedis(() => approvals.pending(clientIds), redis);
          const snapshot: ApprovalEvent = {
            type: 'snapshot',
            pending: list.pending.map(pendingApproval),
            total: list.total,
            byClient: countsOf(list.byClient),
          };
          stream.send('snapshot', snapshot);
          await stream.closed;
        } finally {
          stop();
        }
      } finally {
        stream.end();
      }
    } finally {
      held.release();
    }
  });

  router.post('/v1/approvals/:id/:decision', async (req, res) => {
    const { id, decision } = req.params as { id: string; decision: string };
    if (decision !== 'approve' && decision !== 'reject')
      throw new ApiError('not_found', `no route POST ${req.path}`);
    if (!isCallId(id)) throw new ApiError('not_found', `no call with id "${id}"`);
    const body = objectBody(req);
    const reason = body.reason;
    if (reason !== undefined && (typeof reason !== 'string' || reason.length > 1000)) {
      throw new ApiError('invalid_request', '"reason" must be a string of at most 1000 characters');
    }
    const client = clientOf(res);
    const admin = actorOf(client);
    if (decision === 'approve') {
      const parked = await pipeline.get(client, id);
      // A person approves what someone else asked for: never a call of their own (as another
      // client's user too: one issuer, one subject).
      if (client.user !== undefined && parked.user === client.user)
        throw new ApiError('self_approval', `call ${id} is your own: another admin approves it`, {
          details: { user: client.user },
        });
      // The Cedar `approve` action (docs/policy.md): may this admin approve this call?
      if (parked.status === 'pending_approval') await pipeline.mayApprove(client, parked);
    }
    const result = await guardRedis(
      () =>
        approvals.decide(
          id,
          decision === 'approve'
            ? { kind: 'approve', by: admin }
            : { kind: 'reject', by: admin, ...(reason ? { reason } : {}) },
        ),
      redis,
    );
    if (!result) throw new ApiError('not_found', `no call with id "${id}"`);
    const { record, won } = result;
    if (!won) {
      throw new ApiError(
        'conflict',
        `call ${id} is not pending approval (status: ${record.status})`,
        { details: { status: record.status } },
      );
    }
    if (decision === 'approve') await pipeline.enqueueApproved(record, admin);
    else await pipeline.ended(record).catch(() => undefined);
    feed
      .publish({
        type: 'decided',
        id,
        client: record.clientId,
        decision: decision === 'approve' ? 'approved' : 'rejected',
        by: admin,
        ...(reason ? { reason } : {}),
      })
      .catch(() => undefined);
    metrics.approvalDecisions.inc({ decision: decision === 'approve' ? 'approved' : 'rejected' });
    await audit
      .append(
        audit.entry({
          event: 'approval',
          client: record.clientId,
          ...(record.user === undefined ? {} : { user: record.user }),
          tool: record.tool,
          callId: id,
          status: decision === 'approve' ? 'approved' : 'rejected',
          by: admin,
          ...(reason ? { reason } : {}),
        }),
      )
      .catch(() => undefined);
    res.json({
      id,
      status: record.status,
      decision: decision === 'approve' ? 'approved' : 'rejected',
      by: admin,
    });
  });

  router.get('/v1/audit', async (req, res) => {
    const query = auditQuery(req);
    const { entries, partial } = await guardRedis(() => audit.recent(query), redis);
    // The answer is an array (AuditList); that the scan stopped early goes in a header.
    if (partial) res.set('Toolgate-Partial', 'true');
    res.json(entries);
  });
  return router;
}

/**
 * Admin-only: DELETE /v1/workspaces/{client} schedules the deletion of a client's workspace on
 * every worker host. The gateway touches no host files: it gives the client a new reset id in
 * Redis, and each worker deletes a copy made under another id before the client's next call
 * there (or in its reaper pass). Hence 202 "scheduled": the next call of that client starts with an empty
 * workspace; one already running finishes in the old one. Under `isolation: user` the client's
 * reset reaches each user's workspace too; `?user=<sub>` resets that one user's only.
 */
export function workspaceAdminRoutes(deps: {
  redis: RedisClient;
  resets: WorkspaceResets;
  clientIds: ReadonlySet<string>;
  /** Where each reset is recorded (absent: not recorded). */
  audit?: AuditLog;
}): Router {
  const { redis, resets, clientIds, audit } = deps;
  const router = Router();
  router.delete('/v1/workspaces/:client', requireAdmin, async (req, res) => {
    const client = (req.params as { client: string }).client;
    if (!clientIds.has(client)) throw new ApiError('not_found', `no client with id "${client}"`);
    const user = req.query.user;
    if (
      user !== undefined &&
      (typeof user !== 'string' || user.length === 0 || user.length > MAX_USER_LENGTH)
    ) {
      throw new ApiError(
        'invalid_request',
        `"user" must be given once, 1 to ${MAX_USER_LENGTH} characters (a token's user claim)`,
      );
    }
    const name = user === undefined ? client : principal(client, user);
    const { generation, resetId } = await guardRedis(() => resets.schedule(name), redis);
    await audit
      ?.append(
        audit.entry({
          event: 'workspace',
          client,
          ...(user === undefined ? {} : { user }),
          tool: '',
          status: 'reset',
          by: actorOf(clientOf(res)),
        }),
      )
      .catch(() => undefined);
    res.status(202).json({
      client,
      ...(user === undefined ? {} : { user }),
      status: 'scheduled',
      generation,
      resetId,
    });
  });
  return router;
}
