import type { Approvals, AuditLog, AuditQuery, WorkspaceResets } from '@toolgate/calls';
import { isCallId, redact } from '@toolgate/calls';
import { Router, type Request } from 'express';
import { ApiError } from '../errors.js';
import { clientOf, objectBody, requireAdmin } from '../http.js';
import type { GatewayMetrics } from '../metrics.js';
import { guardRedis, type CallPipeline } from '../pipeline.js';
import type { Redis } from 'ioredis';

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

/** Admin-only: human approval of parked calls, and the audit log. */
export function adminRoutes(deps: {
  redis: Redis;
  approvals: Approvals;
  audit: AuditLog;
  pipeline: CallPipeline;
  metrics: GatewayMetrics;
}): Router {
  const { redis, approvals, audit, pipeline, metrics } = deps;
  const router = Router();
  router.use(['/v1/approvals', '/v1/audit'], requireAdmin);

  router.get('/v1/approvals', async (_req, res) => {
    const pending = await guardRedis(() => approvals.pending(), redis);
    res.json(
      pending.map((r) => ({
        id: r.id,
        tool: r.tool,
        client: r.clientId,
        arguments: redact(r.job?.args),
        createdAt: new Date(r.createdAt).toISOString(),
        expiresAt: new Date(r.expiresAt ?? 0).toISOString(),
      })),
    );
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
    const admin = clientOf(res).id;
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
    metrics.approvalDecisions.inc({ decision: decision === 'approve' ? 'approved' : 'rejected' });
    await audit
      .append(
        audit.entry({
          event: 'approval',
          client: record.clientId,
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
    const event = stringParam(req, 'event');
    if (event !== undefined && !['call', 'refused', 'approval'].includes(event)) {
      throw new ApiError('invalid_request', '"event" must be call, refused or approval');
    }
    const query: AuditQuery = {
      limit: intParam(req, 'limit', 100, 1000),
      ...(stringParam(req, 'client') ? { client: stringParam(req, 'client')! } : {}),
      ...(stringParam(req, 'tool') ? { tool: stringParam(req, 'tool')! } : {}),
      ...(event ? { event: event as AuditQuery['event'] } : {}),
    };
    res.json(await guardRedis(() => audit.recent(query), redis));
  });
  return router;
}

/**
 * Admin-only: DELETE /v1/workspaces/{client} schedules the deletion of a client's workspace on
 * every worker host. The gateway touches no host files: it bumps the client's reset generation
 * in Redis, and each worker deletes its copy before the client's next call there (or in its
 * reaper pass). Hence 202 "scheduled": the next call of that client starts with an empty
 * workspace; one already running finishes in the old one.
 */
export function workspaceAdminRoutes(deps: {
  redis: Redis;
  resets: WorkspaceResets;
  clientIds: ReadonlySet<string>;
}): Router {
  const { redis, resets, clientIds } = deps;
  const router = Router();
  router.delete('/v1/workspaces/:client', requireAdmin, async (req, res) => {
    const client = (req.params as { client: string }).client;
    if (!clientIds.has(client)) throw new ApiError('not_found', `no client with id "${client}"`);
    const generation = await guardRedis(() => resets.schedule(client), redis);
    res.status(202).json({ client, status: 'scheduled', generation });
  });
  return router;
}
