import type { ResultCache, Stats } from '@toolgate/calls';
import type { ToolRegistry } from '@toolgate/registry';
import { Router } from 'express';
import type { RedisClient } from '@toolgate/calls';
import { ApiError } from '../errors.js';
import { clientOf } from '../http.js';
import { guardRedis } from '../pipeline.js';

/**
 * GET /v1/stats: per-tool counts, error rates, latency, rankings, slowest calls, cache. A
 * client sees its own calls of the tools in its scope; admins see everyone's, or one client's
 * with `?client=`. A client's report lists its users (`users`, bounded: USER_STATS_MAX kept per
 * client, USER_STATS_SHOWN shown).
 */
export function statsRoutes(
  redis: RedisClient,
  stats: Stats,
  cache: ResultCache,
  registry: ToolRegistry,
  clientIds: ReadonlySet<string>,
): Router {
  const router = Router();
  router.get('/v1/stats', async (req, res) => {
    const client = clientOf(res);
    const filter = req.query.client;
    if (!client.admin) {
      if (filter !== undefined && filter !== client.id) {
        throw new ApiError('forbidden', "only admin clients may read another client's stats");
      }
      const inScope = (name: string) => {
        const tool = registry.get(name);
        return tool !== undefined && client.scope.allows(tool);
      };
      // A user sees its client's tool stats and, of the per-user rows, its own.
      res.json(
        await guardRedis(
          () =>
            stats.report({
              client: client.id,
              tools: inScope,
              ...(client.user === undefined ? {} : { user: client.user }),
            }),
          redis,
        ),
      );
      return;
    }
    if (filter !== undefined && (typeof filter !== 'string' || !clientIds.has(filter))) {
      throw new ApiError('invalid_request', '"client" must be the id of a configured client');
    }
    res.json(
      await guardRedis(
        async () =>
          stats.report({
            ...(filter === undefined ? {} : { client: filter }),
            cacheKeys: await cache.size(),
          }),
        redis,
      ),
    );
  });
  return router;
}
