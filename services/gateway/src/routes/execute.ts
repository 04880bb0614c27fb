import { Router, type Request, type Response } from 'express';
import type { CallPipeline, CallResponse } from '../pipeline.js';
import { clientOf, objectBody, prepaidOf } from '../http.js';
import { ApiError } from '../errors.js';

/** Synchronous unless `?wait=false` or `Prefer: respond-async`. */
export function wantsWait(req: Request): boolean {
  const wait = req.query.wait;
  if (wait !== undefined && wait !== 'true' && wait !== 'false') {
    throw new ApiError('invalid_request', '"wait" must be true or false');
  }
  if (wait === 'false') return false;
  return !/\brespond-async\b/i.test(req.get('prefer') ?? '');
}

export function sendCall(res: Response, response: CallResponse): void {
  if (response.kind === 'done') {
    // The hot path: a finished call, answered without express's content negotiation.
    const body = JSON.stringify(response.outcome);
    res
      .writeHead(200, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(body),
      })
      .end(body);
    return;
  }
  res
    .status(202)
    .location(`/v1/calls/${response.id}`)
    .json({ id: response.id, status: response.status });
}

export function executeRoutes(pipeline: CallPipeline): Router {
  const router = Router();
  router.post('/tools/:name/execute', async (req, res) => {
    const args = objectBody(req);
    const idempotencyKey = req.get('idempotency-key');
    if (
      idempotencyKey !== undefined &&
      (idempotencyKey.length === 0 || idempotencyKey.length > 255)
    ) {
      throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 characters');
    }
    const response = await pipeline.call(clientOf(res), {
      tool: req.params.name!,
      args,
      wait: wantsWait(req),
      prepaid: prepaidOf(res),
      onBudget: (remaining) => res.setHeader('Toolgate-Budget-Remaining', remaining),
      ...(req.ip ? { sourceIp: req.ip } : {}),
      ...(idempotencyKey ? { idempotencyKey } : {}),
      ...(req.get('x-conversation-id') ? { conversationId: req.get('x-conversation-id')! } : {}),
      ...(req.get('x-toolgate-session') !== undefined
        ? { session: req.get('x-toolgate-session')! }
        : {}),
    });
    sendCall(res, response);
  });
  return router;
}
