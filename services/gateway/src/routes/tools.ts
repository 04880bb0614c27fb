import { toAnthropic, toNative, toOpenAI, type Tool, type ToolRegistry } from '@toolgate/registry';
import { Router, type Request } from 'express';
import { ApiError } from '../errors.js';
import { clientOf } from '../http.js';

const MAX_LIMIT = 1000;

function single(req: Request, name: string): string | undefined {
  const v = req.query[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string')
    throw new ApiError('invalid_request', `query parameter "${name}" must be given once`);
  return v;
}

function listOptions(req: Request) {
  const q = single(req, 'q');
  const category = single(req, 'category');
  const limitText = single(req, 'limit');
  let limit: number | undefined;
  if (limitText !== undefined) {
    if (!/^\d+$/.test(limitText) || Number(limitText) < 1 || Number(limitText) > MAX_LIMIT) {
      throw new ApiError('invalid_request', `"limit" must be an integer from 1 to ${MAX_LIMIT}`);
    }
    limit = Number(limitText);
  }
  const strictText = single(req, 'strict');
  if (strictText !== undefined && strictText !== 'true' && strictText !== 'false') {
    throw new ApiError('invalid_request', '"strict" must be true or false');
  }
  return { q, category, limit, strict: strictText === 'true' };
}

/** Tool listings, each holding only the tools the calling client may use. */
export function toolRoutes(
  registry: ToolRegistry,
  requiresApproval: (tool: Tool) => boolean,
): Router {
  const router = Router();
  const visible = (req: Request, res: Parameters<typeof clientOf>[0]) => {
    const { strict, ...options } = listOptions(req);
    return { tools: registry.list({ ...options, scope: clientOf(res).scope }), strict };
  };
  router.get('/tools', (req, res) => {
    res.json(visible(req, res).tools.map((t) => toNative(t, requiresApproval(t))));
  });
  router.get('/tools/openai', (req, res) => {
    const { tools, strict } = visible(req, res);
    res.json(tools.map((t) => toOpenAI(t, { strict })));
  });
  router.get('/tools/anthropic', (req, res) => {
    res.json(visible(req, res).tools.map(toAnthropic));
  });
  return router;
}
