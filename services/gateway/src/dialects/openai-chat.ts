import type { Tool } from '@toolgate/registry';
import { isRecord, parseArguments, slotContent, str } from './content.js';
import { booleanOption } from './listing.js';
import type { BridgeCall, Dialect } from './types.js';

/** A Chat Completions function tool (`tools` of a chat completion request). */
export interface OpenAIChatTool {
  type: 'function';
  function: {
    name: string;
    description: string;
    parameters: Record<string, unknown>;
    strict?: true;
  };
}

/**
 * Chat Completions functions are not strict unless they say so: with `strict` asked for, a
 * tool that has a strict form (Tool.strictParameters) is listed with it and `strict: true`;
 * one without (a plugin's schema strict mode cannot say) is listed as it is, never with a
 * schema strict mode would reject.
 */
export function toOpenAIChat(tool: Tool, options: { strict?: boolean } = {}): OpenAIChatTool {
  const strict = options.strict ? tool.strictParameters : undefined;
  return {
    type: 'function',
    function: {
      name: tool.name,
      description: tool.description,
      parameters: strict ?? tool.parameters,
      ...(strict ? { strict: true as const } : {}),
    },
  };
}

/**
 * OpenAI Chat Completions. Listing `GET /tools/openai` (`?strict=true`); an assistant message
 * (or `{tool_calls}`, or a whole completion with `choices`) →
 * `{messages: [{role:"tool", tool_call_id, content}]}`.
 */
export const openaiChat: Dialect = {
  name: 'openai-chat',
  // `/tools/openai` predates the Responses listing; clients use it, so it keeps its path.
  listingPath: 'openai',
  listing(tools, request) {
    const strict = booleanOption(request, 'strict') ?? false;
    return tools.map((t) => toOpenAIChat(t, { strict }));
  },
  extract(body) {
    if (Array.isArray(body)) return undefined;
    const choice = Array.isArray(body.choices) ? body.choices[0] : undefined;
    const message = isRecord(body.message)
      ? body.message
      : isRecord(choice) && isRecord(choice.message)
        ? choice.message
        : body;
    if (!Array.isArray(message.tool_calls)) return undefined;
    return message.tool_calls.map((tc, i): BridgeCall => {
      const fn = isRecord(tc) && isRecord(tc.function) ? tc.function : {};
      const id = isRecord(tc) ? str(tc.id) : '';
      return {
        callId: id || `call_${i}`,
        modelId: id !== '',
        name: str(fn.name),
        args: parseArguments(fn.arguments),
      };
    });
  },
  format(slots) {
    return {
      messages: slots.map((slot) => ({
        role: 'tool',
        tool_call_id: slot.call.callId,
        content: slotContent(slot).text,
      })),
    };
  },
};
