/**
 * The MCP server one request gets: built per HTTP request for the authenticated client
 * (stateless, so any gateway answers any request). tools/list shows that client's tools;
 * tools/call goes through the same CallPipeline as every other dialect (validation, policy,
 * approvals, cache, queue, sandbox).
 */
import type { Tool, ToolRegistry } from '@toolgate/registry';
import {
  LOG_LEVEL_META_KEY,
  ProtocolError,
  Server,
  inputRequired,
  type InputRequiredResult,
  type CallToolResult,
  type LoggingLevel,
  type McpRequestContext,
} from '@modelcontextprotocol/server';
import { ApiError } from '../errors.js';
import type { CallPipeline, CallResponse } from '../pipeline.js';
import type { McpCaller } from './caller.js';
import { isLoggingLevel, type LogLevels } from './log-level.js';
import {
  URL_ELICITATION_REQUIRED,
  credentialElicitation,
  declaresUrlElicitation,
  requestCapabilities,
  type UrlElicitationSupport,
} from './elicitation.js';
import { CallNotifier } from './notifier.js';
import type { McpRequests } from './requests.js';
import { principal } from '@toolgate/calls';
import { TASKS_EXTENSION } from './tasks.js';
import { refusal, toMcpTool, toResult } from './tools.js';
import { listingScope, type CallPolicy } from '../policy/cedar.js';

/** `_meta` key naming the session a tools/call runs in (docs/sessions.md). */
export const SESSION_META_KEY = 'toolgate/session';

export interface McpServerDeps {
  registry: ToolRegistry;
  pipeline: Pick<CallPipeline, 'call' | 'get' | 'cancel' | 'watch'>;
  requiresApproval: (tool: Tool) => boolean;
  logLevels: LogLevels;
  requests: McpRequests;
  /** Extra wait beyond a tool's timeout before a synchronous call answers "still running". */
  syncWaitGraceMs: number;
  /** Reported to clients in the initialize / discover result. */
  version: string;
  /** Which 2025-era clients declared URL-mode elicitation at `initialize`. */
  elicitation: UrlElicitationSupport;
  /** Cedar policies: tools/list leaves out what no policy could permit (docs/policy.md). */
  policy?: CallPolicy;
}

const INSTRUCTIONS =
  'toolgate: tools shared by many assistants. Failed calls come back as readable errors ' +
  '(isError) you can act on; some calls wait for an administrator’s approval before they run.';

/** The protocol era a request speaks: 2025-era (`initialize`, sessions) or 2026-07-28. */
export type Era = McpRequestContext['era'];

export function createMcpServer(deps: McpServerDeps, caller: McpCaller, era: Era): Server {
  const { registry, pipeline, requiresApproval, logLevels, requests } = deps;
  const { client, prepaid, conversationId } = caller;
  const server = new Server(
    { name: 'toolgate', version: deps.version },
    {
      capabilities: {
        tools: { listChanged: false },
        logging: {},
        // Tasks (mcp/tasks.ts answers them): the 2025-11-25 utility for task-augmented calls,
        // the 2026-07-28 extension for calls that wait for approval.
        ...(era === 'modern'
          ? { extensions: { [TASKS_EXTENSION]: {} } }
          : { tasks: { cancel: {}, requests: { tools: { call: {} } } } }),
      },
      instructions: INSTRUCTIONS,
    },
  );

  server.setRequestHandler('tools/list', () => ({
    tools: registry.list({ scope: listingScope(client, deps.policy, registry) }).map((t) => ({
      ...toMcpTool(t, requiresApproval),
      // 2025-11-25: any call may be made a task; the 2026 extension needs no per-tool flag.
      ...(era === 'legacy' ? { execution: { taskSupport: 'optional' as const } } : {}),
    })),
  }));

  // 2025-era clients have no session here to hold the level: it is kept per client and user.
  server.setRequestHandler('logging/setLevel', async (request) => {
    await logLevels.set(client, request.params.level);
    return {};
  });

  server.setRequestHandler(
    'tools/call',
    async (request, ctx): Promise<CallToolResult | InputRequiredResult> => {
      const { name, arguments: args } = request.params;
      const tool = registry.get(name);
      // 2026-07-28 requests carry their level (none: no log messages); older clients set it once.
      const level: LoggingLevel | undefined =
        era === 'modern' ? modernLevel(ctx.mcpReq.envelope) : await logLevels.get(client);
      const notifier = new CallNotifier({
        send: (n) => ctx.mcpReq.notify(n),
        tool: name,
        progressToken: ctx.mcpReq._meta?.progressToken,
        level,
      });
      const requestId = ctx.mcpReq.id;
      // The session to run in (docs/sessions.md): MCP's per-request `_meta`, as HTTP's header.
      const session = (ctx.mcpReq._meta as Record<string, unknown> | undefined)?.[SESSION_META_KEY];
      let callId: string | undefined;
      let response: CallResponse;
      try {
        response = await pipeline.call(client, {
          tool: name,
          args: args ?? {},
          wait: true,
          ...(prepaid ? { prepaid } : {}),
          ...(conversationId ? { conversationId } : {}),
          ...(caller.sourceIp ? { sourceIp: caller.sourceIp } : {}),
          ...(typeof session === 'string' ? { session } : {}),
          onEvent: notifier.onEvent,
          onAccepted: (id) => {
            callId = id;
            notifier.callId = id;
            const ttl = Math.ceil(((tool?.timeoutMs ?? 0) + deps.syncWaitGraceMs) / 1000) + 60;
            requests
              .register(principal(client.id, client.user), requestId, id, ttl)
              .catch(() => undefined);
          },
          // On 2026-07-28 a closed response stream is the cancellation. A 2025-era client that
          // disconnects has not cancelled (that spec says so): it sends notifications/cancelled.
          ...(era === 'modern' ? { signal: ctx.mcpReq.signal } : {}),
        });
      } catch (err) {
        await notifier.close();
        if (!(err instanceof ApiError)) throw err;
        const refused = refusal(err);
        if ('result' in refused) return refused.result;
        throw new ProtocolError(refused.error.code, refused.error.message, refused.error.data);
      } finally {
        if (callId)
          requests
            .release(principal(client.id, client.user), requestId, callId)
            .catch(() => undefined);
      }
      await notifier.close();
      // A secret nobody set: a client that takes URL-mode elicitation is sent to the console's
      // Connect page for it (it retries once the secret is set); others read the tool error.
      const elicitation =
        response.kind === 'done'
          ? credentialElicitation(response.outcome, caller.consoleBase)
          : undefined;
      if (elicitation && (await takesUrlElicitation(ctx.mcpReq.envelope))) {
        // 2026-07-28: an input-required result (the client opens the URL, then sends the call
        // again, which runs anew); 2025-11-25: the URLElicitationRequiredError, retried by the
        // client the same way.
        if (era === 'modern') {
          const { message, url } = elicitation;
          return inputRequired({
            inputRequests: { [elicitation.secret]: inputRequired.elicitUrl({ message, url }) },
          });
        }
        const { secret: _secret, ...wire } = elicitation;
        throw new ProtocolError(URL_ELICITATION_REQUIRED, elicitation.message, {
          elicitations: [wire],
        });
      }
      return toResult(response, tool);
    },
  );

  /** Whether this request's client declared URL-mode elicitation (2025-11-25 or later). */
  async function takesUrlElicitation(envelope: unknown): Promise<boolean> {
    // 2026-07-28 requests carry their capabilities (in the envelope the SDK reads off `_meta`);
    // that version is later than 2025-11-25.
    if (era === 'modern') return declaresUrlElicitation(requestCapabilities(envelope));
    return deps.elicitation
      .legacy(principal(client.id, client.user), caller.protocolVersion)
      .catch(() => false);
  }

  return server;
}

function modernLevel(envelope: Record<string, unknown> | undefined): LoggingLevel | undefined {
  const level = envelope?.[LOG_LEVEL_META_KEY];
  return isLoggingLevel(level) ? level : undefined;
}
