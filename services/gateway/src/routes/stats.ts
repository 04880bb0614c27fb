import type { ResultCache, Stats } from '@toolgate/calls';
import { Router } from 'express';
import type { Redis } from 'ioredis';
import { guardRedis } from '../pipeline.js';

/** GET /v1/stats: per-tool counts, error rates, latency, rankings, slowest calls, cache. */
export function statsRoutes(redis: Redis, stats: Stats, cache: ResultCache): Router {
  const router = Router();
  router.get('/v1/stats', async (_req, res) => {
    res.json(await guardRedis(async () => stats.report(await cache.size()), redis));
  });
  return router;
}
