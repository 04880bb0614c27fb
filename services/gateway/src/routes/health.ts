import { isConnectionLost, liveWorkers, type Keys } from '@toolgate/calls';
import { Router } from 'express';
import type { RedisClient } from '@toolgate/calls';

export function healthRoutes(redis: RedisClient, keys: Keys): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    // Lost and reconnecting (a failover under way): say so now rather than let the PING wait
    // in the offline queue for the new master.
    if (isConnectionLost(redis)) {
      res.status(503).json({
        status: 'unavailable',
        reason: `Redis connection lost (${redis.status})`,
      });
      return;
    }
    try {
      await redis.ping();
    } catch (err) {
      res.status(503).json({
        status: 'unavailable',
        reason: `Redis does not answer: ${(err as Error).message}`,
      });
      return;
    }
    const workers = await liveWorkers(redis, keys).catch(() => 0);
    if (workers === 0) {
      res.status(503).json({ status: 'unavailable', reason: 'no worker is alive' });
      return;
    }
    res.json({ status: 'ready', workers });
  });
  return router;
}
