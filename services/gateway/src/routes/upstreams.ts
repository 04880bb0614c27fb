/**
 * Admin-only: the upstreams' state and their tools' pins (`GET /v1/upstreams`), and the
 * approval of a tool's current definition (docs/upstreams.md, "Trust and quarantine").
 */
import type { RedisClient } from '@toolgate/calls';
import type { UpstreamCatalog } from '@toolgate/upstreams';
import { Router } from 'express';
import { actorOf } from '../clients.js';
import { ApiError } from '../errors.js';
import { clientOf, objectBody, requireAdmin } from '../http.js';
import { guardRedis } from '../pipeline.js';

const HASH = /^[0-9a-f]{64}$/;
/** Longer than any name an upstream's tool keeps (the catalog's 64 KiB definition bound aside). */
const TOOL_NAME_MAX = 512;

export function upstreamRoutes(deps: {
  redis: RedisClient;
  /** Absent when no upstream is configured: the list is empty, every approval a 404. */
  catalog: UpstreamCatalog | undefined;
}): Router {
  const { redis, catalog } = deps;
  const router = Router();
  router.use('/v1/upstreams', requireAdmin);

  router.get('/v1/upstreams', async (_req, res) => {
    res.json(catalog ? await guardRedis(() => catalog.report(), redis) : []);
  });

  router.post('/v1/upstreams/:id/tools/:tool/approve', async (req, res) => {
    const { id, tool } = req.params as { id: string; tool: string };
    if (!catalog?.has(id)) throw new ApiError('not_found', `no upstream with id "${id}"`);
    if (tool.length === 0 || tool.length > TOOL_NAME_MAX)
      throw new ApiError('invalid_request', `a tool name has 1 to ${TOOL_NAME_MAX} characters`);
    const { hash } = objectBody(req);
    if (typeof hash !== 'string' || !HASH.test(hash)) {
      throw new ApiError(
        'invalid_request',
        '"hash" must be the definition\'s sha256 as 64 lower-case hex digits (GET /v1/upstreams)',
      );
    }
    const by = actorOf(clientOf(res));
    const result = await guardRedis(() => catalog.approve(id, tool, hash, by), redis);
    if (result.kind === 'unknown')
      throw new ApiError('not_found', `upstream "${id}" has no tool "${tool}"`);
    if (result.kind === 'conflict') {
      throw new ApiError(
        'conflict',
        `the definition of "${tool}" changed: its hash is now ${result.current}; read it again before approving`,
        { details: { current: result.current } },
      );
    }
    res.json({
      upstream: id,
      tool,
      status: 'approved',
      hash,
      approvedBy: result.entry.by,
      ...(result.entry.approvedAt
        ? { approvedAt: new Date(result.entry.approvedAt).toISOString() }
        : {}),
    });
  });
  return router;
}
