import { isRecord, parseArguments, slotContent, str } from './content.js';
import type { BridgeCall, Dialect } from './types.js';

/**
 * OpenAI Chat Completions: an assistant message (or `{tool_calls}`, or a whole completion
 * with `choices`) → `{messages: [{role:"tool", tool_call_id, content}]}`.
 */
export const openaiChat: Dialect = {
  name: 'openai-chat',
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
