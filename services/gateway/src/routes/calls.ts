import { Router } from 'express';
import type { CallPipeline } from '../pipeline.js';
import { clientOf } from '../http.js';

export function callRoutes(pipeline: CallPipeline): Router {
  const router = Router();
  router.get('/v1/calls/:id', async (req, res) => {
    const record = await pipeline.get(clientOf(res), req.params.id!);
    res.json({
      id: record.id,
      tool: record.tool,
      status: record.status,
      createdAt: new Date(record.createdAt).toISOString(),
      ...(record.outcome
        ? {
            ...(record.outcome.status === 'ok'
              ? { result: record.outcome.result }
              : { error: record.outcome.error }),
            durationMs: record.outcome.durationMs,
            cached: record.outcome.cached,
            // The stored copy was cut to calls.maxResultBytes; the synchronous answer was whole.
            ...(record.outcome.resultTruncated
              ? { resultTruncated: record.outcome.resultTruncated }
              : {}),
          }
        : {}),
    });
  });
  return router;
}
