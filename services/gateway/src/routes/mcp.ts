/**
 * POST /mcp: MCP Streamable HTTP, stateless (docs/http-api.md), with the official SDK. Each request gets
 * its own MCP server bound to the authenticated client: tools/list shows that client's tools,
 * tools/call goes through the same CallPipeline as every other dialect (validation, policy,
 * approvals, cache, queue, sandbox).
 */
import { responseContent } from '../dialects/content.js';
import type { CallOutcome } from '@toolgate/calls';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult,
  type Tool as McpTool,
} from '@modelcontextprotocol/sdk/types.js';
import { Router, type Request } from 'express';
import type { Client } from '../clients.js';
import { ApiError } from '../errors.js';
import { clientOf, prepaidOf } from '../http.js';
import type { CallPipeline, CallResponse } from '../pipeline.js';
import type { Prepaid } from '../policy/limits.js';

export interface McpDeps {
  registry: ToolRegistry;
  pipeline: Pick<CallPipeline, 'call'>;
  /** Reported to clients in the initialize result. */
  version?: string;
}

const INSTRUCTIONS =
  'toolgate: tools shared by many assistants. Failed calls come back as readable errors ' +
  '(isError) you can act on; some calls wait for an administrator’s approval before they run.';

/** ApiError codes that are the model's to fix: a tool result it reads, not a protocol error. */
const TOOL_LEVEL_ERRORS = new Set([
  'invalid_arguments',
  'invalid_json',
  'invalid_request',
  'payload_too_large',
  'rate_limited',
  'loop_limit',
  'idempotency_mismatch',
  'too_many_in_flight',
]);

export function mcpRoutes({ registry, pipeline, version = '0.1.0' }: McpDeps): Router {
  const router = Router();

  router.post('/mcp', async (req, res) => {
    const server = serverFor(clientOf(res), req, { registry, pipeline, version }, prepaidOf(res));
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined, // stateless: any gateway behind the balancer answers
      enableJsonResponse: true,
    });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  });

  // Stateless: no server-initiated stream to open (GET) and no session to end (DELETE).
  router.all('/mcp', (_req, res) => {
    res
      .status(405)
      .set('Allow', 'POST')
      .json({
        jsonrpc: '2.0',
        error: { code: ErrorCode.ConnectionClosed, message: 'Method not allowed: use POST' },
        id: null,
      });
  });

  return router;
}

function serverFor(
  client: Client,
  req: Request,
  deps: Required<Pick<McpDeps, 'version'>> & Omit<McpDeps, 'version'>,
  prepaid?: Prepaid,
): Server {
  const server = new Server(
    { name: 'toolgate', version: deps.version },
    { capabilities: { tools: { listChanged: false } }, instructions: INSTRUCTIONS },
  );
  const conversationId = req.get('x-conversation-id');

  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: deps.registry.list({ scope: client.scope }).map(toMcpTool),
  }));

  server.setRequestHandler(CallToolRequestSchema, async (request): Promise<CallToolResult> => {
    const { name, arguments: args } = request.params;
    let response: CallResponse;
    try {
      response = await deps.pipeline.call(client, {
        tool: name,
        args: args ?? {},
        wait: true,
        ...(prepaid ? { prepaid } : {}),
        ...(conversationId ? { conversationId } : {}),
      });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (TOOL_LEVEL_ERRORS.has(err.code)) return errorResult(err.code, err.message, err.details);
      // Unknown or forbidden tools are the client's mistake, not the model's (the tool was
      // never listed): a protocol error, as the MCP spec has it. Redis or workers down: internal.
      const code =
        err.code === 'unknown_tool' || err.code === 'forbidden'
          ? ErrorCode.InvalidParams
          : ErrorCode.InternalError;
      throw new McpError(code, err.message, { code: err.code });
    }
    return toResult(response);
  });

  return server;
}

function toMcpTool(tool: Tool): McpTool {
  return {
    name: tool.name,
    description: tool.description,
    inputSchema: tool.parameters as McpTool['inputSchema'],
    annotations: {
      destructiveHint: tool.risk === 'destructive',
      idempotentHint: tool.idempotent,
    },
  };
}

/** The same texts the dialect bridge gives, so every assistant reads the same thing. */
function toResult(response: CallResponse): CallToolResult {
  const { text, isError } = responseContent(response);
  if (response.kind === 'accepted') {
    return {
      content: [{ type: 'text', text }],
      _meta: { 'toolgate/call': { id: response.id, status: response.status } },
    };
  }
  const { outcome } = response;
  const result = outcome.result ?? null;
  return {
    content: [{ type: 'text', text }],
    ...(isError ? { isError: true } : {}),
    // Objects also go out structured, for clients that read structuredContent.
    ...(!isError && isRecord(result) ? { structuredContent: result } : {}),
    _meta: { 'toolgate/call': callMeta(outcome) },
  };
}

function errorResult(code: string, message: string, details?: unknown): CallToolResult {
  const error = { code, message, ...(details === undefined ? {} : { details }) };
  return { content: [{ type: 'text', text: JSON.stringify({ error }) }], isError: true };
}

function callMeta(outcome: CallOutcome) {
  return {
    id: outcome.id,
    status: outcome.status,
    durationMs: outcome.durationMs,
    cached: outcome.cached,
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
