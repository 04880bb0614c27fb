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
import type { Held, HeldConnections } from '../held-connections.js';
import { clientOf, prepaidOf } from '../http.js';
import { LogLevels } from '../mcp/log-level.js';
import type { OriginPolicy } from '../mcp/origin.js';
import { UrlElicitationSupport } from '../mcp/elicitation.js';
import { McpRequests } from '../mcp/requests.js';
import { callerOf, type McpCaller } from '../mcp/caller.js';
import type { CallPolicy } from '../policy/cedar.js';
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
  /** Cedar policies: listings leave out what no policy could permit (docs/policy.md). */
  policy?: CallPolicy;
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
    ...(deps.policy ? { policy: deps.policy } : {}),
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
    const protocolVersion = req.get('mcp-protocol-version');
    // JSON-RPC batches went with 2025-06-18: a client that names that revision or a later one
    // does not send them. One that names none (2025-03-26, which the SDK still negotiates) may:
    // each element is then checked, held and mapped below as the request it is.
    const batch = Array.isArray(req.body);
    if (batch && protocolVersion !== undefined && !BATCH_REVISIONS.has(protocolVersion)) {
      jsonRpcError(
        res,
        400,
        `Invalid Request: MCP ${protocolVersion.slice(0, 20)} has no JSON-RPC batches; send each message in a POST of its own`,
      );
      return;
    }
    const messages: unknown[] = batch ? (req.body as unknown[]) : [req.body];
    if (messages.length > MAX_BATCH) {
      jsonRpcError(res, 400, `Invalid Request: a batch holds at most ${MAX_BATCH} messages`);
      return;
    }
    // A token whose scopes lack the tool is told so at the HTTP level (403 insufficient_scope),
    // where an MCP client looks for a step-up challenge; a tool result could not carry it.
    for (const message of messages) {
      const stepUp = scopeStepUp(deps.registry, clientOf(res), message);
      if (stepUp) {
        res.status(stepUp.status).set(stepUp.headers);
        jsonRpcError(res, 403, stepUp.message, requestIdOf(message));
        return;
      }
    }
    // A request that waits for a call holds its connection: a slot of the client's budget,
    // taken before any await, given back when the response closes (ended, failed or cut). A
    // batch holds one per element that waits.
    const waiting = messages.filter((m) => waitsForCall(m, batch)).length;
    const held = waiting > 0 ? await holdSlots(deps.held, res, clientOf(res), waiting) : undefined;
    if (held?.signal.aborted) return held.release();
    const conversationId = req.get('x-conversation-id');
    const prepaid = prepaidOf(res);
    const caller: McpCaller = {
      client: clientOf(res),
      ...(prepaid ? { prepaid } : {}),
      ...(conversationId ? { conversationId } : {}),
      ...(req.ip ? { sourceIp: req.ip } : {}),
      ...(protocolVersion ? { protocolVersion } : {}),
      consoleBase: deps.publicOrigin ?? `${req.protocol}://${req.get('host') ?? 'localhost'}`,
    };
    // A 2025-era client declares its capabilities here only (no session is kept).
    for (const message of messages) {
      const init = initializeParams(message);
      if (init === undefined) continue;
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
    for (const message of messages) {
      const cancelled = cancelledRequestId(message);
      if (cancelled === undefined) continue;
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

/** Protocol revisions that had JSON-RPC batches (2025-06-18 removed them). */
const BATCH_REVISIONS = new Set(['2024-11-05', '2025-03-26']);
/** The most messages in one batch (the SDK's own bound): each may cost a Redis look-up here. */
const MAX_BATCH = 100;

/**
 * Whether the message is one that keeps its connection until a call ends: `tools/call`
 * (unless it asks for a task, answered at once) and the 2025 `tasks/result`. In a batch every
 * `tools/call` waits: task messages are answered as tasks only when they come alone.
 */
function waitsForCall(body: unknown, batched: boolean): boolean {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return false;
  const { method, params } = body as { method?: unknown; params?: { task?: unknown } };
  if (method === 'tasks/result') return true;
  return (
    method === 'tools/call' && (batched || typeof params !== 'object' || params?.task === undefined)
  );
}

/**
 * `count` slots of the client's budget for one response, taken one after the other; none
 * kept when one is refused. The first is taken before any await (HeldConnections.hold).
 */
async function holdSlots(
  budget: HeldConnections,
  res: Response,
  client: Client,
  count: number,
): Promise<Held> {
  const holds: Held[] = [];
  try {
    for (let i = 0; i < count; i++) holds.push(await budget.hold(res, client));
  } catch (err) {
    for (const held of holds) held.release();
    throw err;
  }
  if (holds.length === 1) return holds[0]!;
  return {
    signal: AbortSignal.any(holds.map((h) => h.signal)),
    release: () => holds.forEach((h) => h.release()),
  };
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
