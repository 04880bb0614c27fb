/**
 * POST /mcp: MCP Streamable HTTP with the official SDK (v2, `createMcpHandler`), stateless:
 * every request is answered by a fresh server for its client, so any gateway behind the
 * balancer answers any request (docs/mcp.md). Serves 2026-07-28 clients and 2025-era clients
 * (2025-06-18, 2025-11-25) from the same factory.
 */
import { principal, type Keys } from '@toolgate/calls';
import type { Logger } from '@toolgate/log';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import { toNodeHandler, type NodeIncomingMessageLike } from '@modelcontextprotocol/node';
import { createMcpHandler, ProtocolErrorCode } from '@modelcontextprotocol/server';
import { Router, type Response } from 'express';
import type { RedisClient } from '@toolgate/calls';
import { ApiError } from '../errors.js';
import type { Client } from '../clients.js';
import type { HeldConnections } from '../held-connections.js';
import { clientOf, prepaidOf } from '../http.js';
import { LogLevels } from '../mcp/log-level.js';
import type { OriginPolicy } from '../mcp/origin.js';
import { UrlElicitationSupport } from '../mcp/elicitation.js';
import { McpRequests } from '../mcp/requests.js';
import { callerOf, type McpCaller } from '../mcp/caller.js';
import { createMcpServer } from '../mcp/server.js';
import { McpTasks } from '../mcp/tasks.js';
import type { CallPipeline } from '../pipeline.js';

export interface McpDeps {
  registry: ToolRegistry;
  pipeline: Pick<CallPipeline, 'call' | 'get' | 'cancel' | 'watch'>;
  requiresApproval: (tool: Tool) => boolean;
  origins: OriginPolicy;
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  syncWaitGraceMs: number;
  /** How long call records live (`calls.ttlSeconds`): the lifetime of MCP tasks. */
  callTtlSeconds: number;
  /** Reported to clients in the initialize result. */
  version?: string;
  /** The client's budget of held connections: MCP requests that wait hold one slot each. */
  held: HeldConnections;
  /**
   * toolgate's public origin (`auth.oauth.audience`'s), for links to the console; absent: the
   * request's own scheme and host.
   */
  publicOrigin?: string;
}

export function mcpRoutes(deps: McpDeps): Router {
  const { origins, logger } = deps;
  const log = logger.child({ component: 'mcp' });
  const requests = new McpRequests(deps.redis, deps.keys);
  const elicitation = new UrlElicitationSupport(deps.redis, deps.keys);
  const tasks = new McpTasks({
    registry: deps.registry,
    pipeline: deps.pipeline,
    requiresApproval: deps.requiresApproval,
    ttlMs: deps.callTtlSeconds * 1000,
  });
  const serverDeps = {
    registry: deps.registry,
    pipeline: deps.pipeline,
    requiresApproval: deps.requiresApproval,
    logLevels: new LogLevels(deps.redis, deps.keys),
    requests,
    syncWaitGraceMs: deps.syncWaitGraceMs,
    version: deps.version ?? '0.1.0',
    elicitation,
  };
  const handler = createMcpHandler((ctx) => createMcpServer(serverDeps, callerOf(ctx), ctx.era), {
    onerror: (err) => log.debug({ err: err.message }, 'mcp request rejected'),
  });
  const serve = toNodeHandler(handler, {
    onerror: (err) => log.warn({ err: err.message }, 'mcp handler failed'),
  });
  const router = Router();

  router.post('/mcp', async (req, res) => {
    const verdict = origins.check(req.get('origin'), req.get('host'));
    if (!verdict.ok) {
      jsonRpcError(res, 403, `Forbidden: ${verdict.reason}`);
      return;
    }
    // A token whose scopes lack the tool is told so at the HTTP level (403 insufficient_scope),
    // where an MCP client looks for a step-up challenge; a tool result could not carry it.
    const stepUp = scopeStepUp(deps.registry, clientOf(res), req.body);
    if (stepUp) {
      res.status(stepUp.status).set(stepUp.headers);
      jsonRpcError(res, 403, stepUp.message, requestIdOf(req.body));
      return;
    }
    // A request that waits for a call holds its connection: a slot of the client's budget,
    // taken before any await, given back when the response closes (ended, failed or cut).
    const held = waitsForCall(req.body) ? await deps.held.hold(res, clientOf(res)) : undefined;
    if (held?.signal.aborted) return held.release();
    const conversationId = req.get('x-conversation-id');
    const protocolVersion = req.get('mcp-protocol-version');
    const prepaid = prepaidOf(res);
    const caller: McpCaller = {
      client: clientOf(res),
      ...(prepaid ? { prepaid } : {}),
      ...(conversationId ? { conversationId } : {}),
      ...(protocolVersion ? { protocolVersion } : {}),
      consoleBase: deps.publicOrigin ?? `${req.protocol}://${req.get('host') ?? 'localhost'}`,
    };
    // A 2025-era client declares its capabilities here only (no session is kept).
    const init = initializeParams(req.body);
    if (init !== undefined) {
      await elicitation
        .initialized(principal(caller.client.id, caller.client.user), init)
        .catch((err: unknown) => log.warn({ err }, 'mcp capabilities not recorded'));
    }
    // The adapter hands `req.auth` to the factory as `authInfo`: the key was checked already.
    const request: NodeIncomingMessageLike = Object.assign(req, {
      auth: {
        token: '',
        clientId: caller.client.id,
        scopes: [...(caller.client.grant?.scopes ?? [])],
        extra: { 'toolgate/caller': caller },
      },
    });
    // Tasks are answered from the call records, before (and instead of) the MCP server.
    const gone = new AbortController();
    res.on('close', () => gone.abort());
    const answer = await tasks.answer(caller, req.body, held?.signal ?? gone.signal);
    if (answer) {
      res.json(answer);
      return;
    }
    // 2025-era cancellation arrives as its own POST, maybe on another gateway than the call's
    // request: the call is found through Redis. (The SDK then acknowledges it with 202.)
    const cancelled = cancelledRequestId(req.body);
    if (cancelled !== undefined) {
      const callId = await requests
        .lookup(principal(caller.client.id, caller.client.user), cancelled)
        .catch(() => undefined);
      if (callId) {
        await deps.pipeline.cancel(caller.client, callId).catch((err: unknown) => {
          // Already ended or gone: the MCP spec lets a server ignore such a cancel.
          if (!(err instanceof ApiError)) log.warn({ err }, 'mcp cancel failed');
        });
      }
    }
    await serve(request, res, req.body);
  });

  // Stateless: no server-initiated stream to open (GET) and no session to end (DELETE).
  router.all('/mcp', (_req, res) => {
    res.set('Allow', 'POST');
    jsonRpcError(res, 405, 'Method not allowed: use POST');
  });

  return router;
}

/**
 * Whether the message is one that keeps its connection until a call ends: `tools/call`
 * (unless it asks for a task, answered at once) and the 2025 `tasks/result`.
 */
function waitsForCall(body: unknown): boolean {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return false;
  const { method, params } = body as { method?: unknown; params?: { task?: unknown } };
  if (method === 'tasks/result') return true;
  return method === 'tools/call' && (typeof params !== 'object' || params?.task === undefined);
}

/** The params of an `initialize` request, if the body is one. */
function initializeParams(body: unknown): unknown {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const { method, params } = body as { method?: unknown; params?: unknown };
  return method === 'initialize' ? (params ?? {}) : undefined;
}

/** The request a `notifications/cancelled` message names, if the body is one. */
function cancelledRequestId(body: unknown): string | number | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const { method, params } = body as { method?: unknown; params?: { requestId?: unknown } };
  if (method !== 'notifications/cancelled') return undefined;
  const id = params?.requestId;
  return typeof id === 'string' || typeof id === 'number' ? id : undefined;
}

/** The step-up a `tools/call` for a tool outside the token's scopes needs, if it is one. */
function scopeStepUp(registry: ToolRegistry, client: Client, body: unknown): ApiError | undefined {
  if (!client.grant || typeof body !== 'object' || body === null || Array.isArray(body))
    return undefined;
  const { method, params } = body as { method?: unknown; params?: { name?: unknown } };
  if (method !== 'tools/call' || typeof params?.name !== 'string') return undefined;
  const tool = registry.get(params.name);
  return tool && client.grant.stepUp(tool);
}

function requestIdOf(body: unknown): string | number | null {
  const id = (body as { id?: unknown } | null)?.id;
  return typeof id === 'string' || typeof id === 'number' ? id : null;
}

function jsonRpcError(
  res: Response,
  status: number,
  message: string,
  id: string | number | null = null,
): void {
  res.status(status).json({
    jsonrpc: '2.0',
    error: { code: status === 405 ? -32000 : ProtocolErrorCode.InvalidRequest, message },
    id,
  });
}
