import { SESSION_TOOLS, type SessionTool } from '@toolgate/calls';
import { Router } from 'express';
import { DIALECTS, dialectNamed, type BridgeSlot, type Dialect } from '../dialects/index.js';
import type { Client } from '../clients.js';
import { ApiError } from '../errors.js';
import { clientOf, prepaidOf } from '../http.js';
import type { CallPipeline } from '../pipeline.js';

const MAX_CALLS = 64;

/**
 * POST /v1/tool-calls: what a model produced → what goes back to it, same dialect. Calls run
 * in parallel; a bad call gets an error in its own slot and the others still run.
 */
/** Refusals that concern the whole request, answered as the request's own error (with Retry-After). */
const REQUEST_LEVEL = new Set(['unavailable', 'rate_limited', 'too_many_in_flight']);

/** `X-Toolgate-Session: conversation`: the session of the request's `X-Conversation-Id`. */
const CONVERSATION_SESSION = 'conversation';

export function toolCallRoutes(
  pipeline: CallPipeline,
  {
    cancelOnDisconnect,
    conversationSession,
    perConversation,
  }: {
    cancelOnDisconnect: boolean;
    /** The conversation's session for a tool (routes/sessions.ts conversationSessions). */
    conversationSession: (
      client: Client,
      conversationId: string,
      tool: SessionTool,
    ) => Promise<string | undefined>;
    /** sessions.perConversation: every request with a conversation id asks for its session. */
    perConversation: boolean;
  },
): Router {
  const router = Router();
  router.post('/v1/tool-calls', async (req, res) => {
    const body: unknown = req.body;
    if (typeof body !== 'object' || body === null) {
      throw new ApiError('invalid_json', 'the request body must be a JSON object or array');
    }
    const dialectName = typeof req.query.dialect === 'string' ? req.query.dialect : undefined;
    let dialect: Dialect | undefined;
    let calls;
    if (dialectName) {
      dialect = dialectNamed(dialectName);
      if (!dialect)
        throw new ApiError(
          'invalid_request',
          `unknown dialect "${dialectName}"; use one of ${DIALECTS.map((d) => d.name).join(', ')}`,
        );
      calls = dialect.extract(body as Record<string, unknown>);
    } else {
      for (const d of DIALECTS) {
        calls = d.extract(body as Record<string, unknown>);
        if (calls) {
          dialect = d;
          break;
        }
      }
    }
    if (!dialect || !calls) {
      throw new ApiError(
        'invalid_request',
        'no tool calls found: send an OpenAI assistant message with tool_calls, OpenAI Responses function_call items, or Anthropic tool_use blocks',
      );
    }
    if (calls.length > MAX_CALLS)
      throw new ApiError('invalid_request', `at most ${MAX_CALLS} tool calls per request`);
    const client = clientOf(res);
    const conversationId = req.get('x-conversation-id');
    // A session (docs/sessions.md) for the message's run_python / run_shell calls: a named
    // one, or the conversation's (created by its first call that asks for one).
    const named = req.get('x-toolgate-session');
    const byConversation =
      named === CONVERSATION_SESSION ||
      (named === undefined && perConversation && !!conversationId);
    if (byConversation && !conversationId) {
      throw new ApiError(
        'invalid_request',
        `"X-Toolgate-Session: ${CONVERSATION_SESSION}" needs an X-Conversation-Id header`,
      );
    }
    const sessionFor = async (tool: string): Promise<string | undefined> => {
      if (!SESSION_TOOLS.includes(tool as SessionTool)) return undefined;
      if (!byConversation) return named;
      return conversationSession(client, conversationId!, tool as SessionTool);
    };
    const prepaid = prepaidOf(res);
    // A client that hangs up before the answer cancels the calls it no longer waits for
    // (calls.cancelOnDisconnect); finished ones are unaffected.
    const gone = new AbortController();
    if (cancelOnDisconnect) {
      res.on('close', () => {
        if (!res.writableFinished) gone.abort();
      });
    }
    const slots = await Promise.all(
      calls.map(async (call): Promise<BridgeSlot> => {
        if (!call.name)
          return {
            call,
            error: new ApiError('invalid_request', 'the tool call has no function name'),
          };
        if (!call.args.ok) return { call, error: new ApiError('invalid_json', call.args.message) };
        try {
          const session = await sessionFor(call.name);
          const response = await pipeline.call(client, {
            tool: call.name,
            args: call.args.value,
            wait: true,
            prepaid,
            signal: gone.signal,
            ...(req.ip ? { sourceIp: req.ip } : {}),
            // The model's tool call id makes a re-sent message a retry; a call without one
            // runs as a new call (no key), never as whatever another `call_0` ran.
            ...(call.modelId ? { idempotencyKey: `tool-call:${call.callId}` } : {}),
            ...(conversationId ? { conversationId } : {}),
            ...(session !== undefined ? { session } : {}),
          });
          return { call, response };
        } catch (err) {
          // Trouble with the whole request (Redis down, client over its rate or its calls in
          // flight) fails the request; anything about this one call goes in its slot for the model to read.
          if (err instanceof ApiError && !REQUEST_LEVEL.has(err.code)) return { call, error: err };
          throw err;
        }
      }),
    );
    res.json({ dialect: dialect.name, ...dialect.format(slots) });
  });
  return router;
}
