/**
 * The shards and client moves between them, for admins (docs/sharding.md, "Moving a client"):
 * GET /v1/shards, POST /v1/shards/moves, GET /v1/shards/moves/{id}.
 */
import { Router, type RequestHandler } from 'express';
import { ApiError } from '../errors.js';
import { objectBody, requireAdmin } from '../http.js';
import type { ShardMoves } from '../shard-moves.js';

/** `body`: the JSON body reader (these routes come before the shards' routers, which read it). */
export function shardMoveRoutes(moves: ShardMoves, body: RequestHandler): Router {
  const router = Router();
  router.use('/v1/shards', requireAdmin);

  router.get('/v1/shards', (_req, res) => {
    res.json({ shards: moves.shards() });
  });

  router.post('/v1/shards/moves', body, async (req, res) => {
    const body = objectBody(req);
    const { client, shard } = body;
    if (typeof client !== 'string' || client === '' || typeof shard !== 'string' || shard === '')
      throw new ApiError(
        'invalid_request',
        'give {"client": "<client id>", "shard": "<shard id>"}',
      );
    const move = await moves.move(client, shard);
    res.status(202).location(`/v1/shards/moves/${move.id}`).json(move);
  });

  router.get('/v1/shards/moves/:id', async (req, res) => {
    const move = await moves.get(req.params.id);
    if (!move) throw new ApiError('not_found', `no shard move "${req.params.id}"`);
    res.json(move);
  });

  return router;
}
