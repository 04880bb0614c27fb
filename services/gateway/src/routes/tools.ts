import type { Tool, ToolRegistry } from '@toolgate/registry';
import { Router, type Request, type Response } from 'express';
import { DIALECTS, type ListingRequest } from '../dialects/index.js';
import { ApiError } from '../errors.js';
import { clientOf } from '../http.js';
import type { NativeTool } from '../api-types.js';
import { listingScope, type CallPolicy } from '../policy/cedar.js';

const MAX_LIMIT = 1000;

/** `requiresApproval` may be widened by policy (config), so the caller passes the final word. */
export function toNative(tool: Tool, requiresApproval = tool.requiresApproval): NativeTool {
  return {
    name: tool.name,
    description: tool.description,
    category: tool.category,
    parameters: tool.parameters,
    risk: tool.risk,
    requiresApproval,
    sandboxed: tool.sandbox !== undefined,
    strict: tool.strict,
    timeoutMs: tool.timeoutMs,
    cacheTtlSeconds: tool.cacheTtlSeconds,
  };
}

function single(req: Request, name: string): string | undefined {
  const v = req.query[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string')
    throw new ApiError('invalid_request', `query parameter "${name}" must be given once`);
  return v;
}

/** The filters every listing takes; each dialect reads its own options besides. */
function filters(req: Request) {
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
  return { q, category, limit };
}

/**
 * Tool listings, each holding only the tools the calling client may use, in the registry's
 * stable order: the native `GET /tools`, and `GET /tools/<listingPath>` for every dialect.
 */
export function toolRoutes(
  registry: ToolRegistry,
  requiresApproval: (tool: Tool) => boolean,
  policy?: CallPolicy,
): Router {
  const router = Router();
  const scopeOf = (res: Response) => listingScope(clientOf(res), policy, registry);
  const listed = (req: Request, res: Response) =>
    registry.list({ ...filters(req), scope: scopeOf(res) });
  router.get('/tools', (req, res) => {
    res.json(listed(req, res).map((t) => toNative(t, requiresApproval(t))));
  });
  for (const dialect of DIALECTS) {
    router.get(`/tools/${dialect.listingPath}`, (req, res) => {
      const tools = listed(req, res);
      let visible: readonly Tool[] | undefined;
      const request: ListingRequest = {
        option: (name) => single(req, name),
        get visible() {
          return (visible ??= registry.list({ scope: scopeOf(res) }));
        },
      };
      res.json(dialect.listing(tools, request));
    });
  }
  return router;
}
