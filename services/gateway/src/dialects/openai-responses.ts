import { isRecord, parseArguments, slotContent, str } from './content.js';
import type { BridgeCall, Dialect } from './types.js';

/**
 * OpenAI Responses: `function_call` items (an array, or a response's `output`) →
 * `{items: [{type:"function_call_output", call_id, output}]}` to append to the next input.
 */
export const openaiResponses: Dialect = {
  name: 'openai-responses',
  extract(body) {
    const list = Array.isArray(body)
      ? body
      : Array.isArray(body.output)
        ? body.output
        : Array.isArray(body.input)
          ? body.input
          : undefined;
    if (!list) return undefined;
    const calls = list.filter((item) => isRecord(item) && item.type === 'function_call') as Record<
      string,
      unknown
    >[];
    if (calls.length === 0) return undefined;
    return calls.map((item, i): BridgeCall => {
      const id = str(item.call_id) || str(item.id);
      return {
        callId: id || `call_${i}`,
        modelId: id !== '',
        name: str(item.name),
        args: parseArguments(item.arguments),
      };
    });
  },
  format(slots) {
    return {
      items: slots.map((slot) => ({
        type: 'function_call_output',
        call_id: slot.call.callId,
        output: slotContent(slot).text,
      })),
    };
  },
};
