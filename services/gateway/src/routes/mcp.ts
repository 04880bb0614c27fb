/**
 * POST /mcp: MCP Streamable HTTP with the official SDK (v2, `createMcpHandler`), stateless:
 * every request is answered by a fresh server for its client, so any gateway behind the
 * balancer answers any request (docs/mcp.md). Serves 2026-07-28 clients and 2025-era clients
 * (2025-06-18, 2025-11-25) from the same factory.
 */
import type { Keys } from '@toolgate/calls';
import type { Logger } from '@toolgate/log';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import { toNodeHandler, type NodeIncomingMessageLike } from '@modelcontextprotocol/node';
import { createMcpHandler, ProtocolErrorCode } from '@modelcontextprotocol/server';
import { Router, type Response } from 'express';
import type { Redis } from 'ioredis';
import { clientOf, prepaidOf } from '../http.js';
import { LogLevels } from '../mcp/log-level.js';
import type { OriginPolicy } from '../mcp/origin.js';
import { callerOf, createMcpServer, type McpCaller } from '../mcp/server.js';
import type { CallPipeline } from '../pipeline.js';

export interface McpDeps {
  registry: ToolRegistry;
  pipeline: Pick<CallPipeline, 'call'>;
  requiresApproval: (tool: Tool) => boolean;
  origins: OriginPolicy;
  redis: Redis;
  keys: Keys;
  logger: Logger;
  /** Reported to clients in the initialize result. */
  version?: string;
}

export function mcpRoutes(deps: McpDeps): Router {
  const { origins, logger } = deps;
  const log = logger.child({ component: 'mcp' });
  const serverDeps = {
    registry: deps.registry,
    pipeline: deps.pipeline,
    requiresApproval: deps.requiresApproval,
    logLevels: new LogLevels(deps.redis, deps.keys),
    version: deps.version ?? '0.1.0',
  };
  const handler = createMcpHandler((ctx) => createMcpServer(serverDeps, callerOf(ctx)), {
    onerror: (err) => log.debug({ err: err.message }, 'mcp request rejected'),
  });
  const serve = toNodeHandler(handler, {
    onerror: (err) => log.warn({ err: err.message }, 'mcp handler failed'),
  });
  const router = Router();

  router.post('/mcp', (req, res) => {
    const verdict = origins.check(req.get('origin'), req.get('host'));
    if (!verdict.ok) {
      jsonRpcError(res, 403, `Forbidden: ${verdict.reason}`);
      return;
    }
    const conversationId = req.get('x-conversation-id');
    const prepaid = prepaidOf(res);
    const caller: McpCaller = {
      client: clientOf(res),
      ...(prepaid ? { prepaid } : {}),
      ...(conversationId ? { conversationId } : {}),
    };
    // The adapter hands `req.auth` to the factory as `authInfo`: the key was checked already.
    const request: NodeIncomingMessageLike = Object.assign(req, {
      auth: {
        token: '',
        clientId: caller.client.id,
        scopes: [],
        extra: { 'toolgate/caller': caller },
      },
    });
    void serve(request, res, req.body);
  });

  // Stateless: no server-initiated stream to open (GET) and no session to end (DELETE).
  router.all('/mcp', (_req, res) => {
    res.set('Allow', 'POST');
    jsonRpcError(res, 405, 'Method not allowed: use POST');
  });

  return router;
}

function jsonRpcError(res: Response, status: number, message: string): void {
  res.status(status).json({
    jsonrpc: '2.0',
    error: { code: status === 405 ? -32000 : ProtocolErrorCode.InvalidRequest, message },
    id: null,
  });
}
