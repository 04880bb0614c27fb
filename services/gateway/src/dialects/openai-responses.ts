import type { Tool } from '@toolgate/registry';
import { isRecord, parseArguments, slotContent, str } from './content.js';
import { booleanOption } from './listing.js';
import type { BridgeCall, Dialect } from './types.js';

/** A Responses API function tool: flat, no `function` wrapper. */
export interface OpenAIResponsesTool {
  type: 'function';
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  strict: boolean;
}

/**
 * `strict` is always spelled out, never left to the API's default: that default has been
 * `true` in the Responses API (its SDK types make the field mandatory), and a tool without a
 * strict form, listed as strict, would get the whole request rejected. A strict entry carries
 * the tool's strict form (Tool.strictParameters), a non-strict one the full schema.
 */
export function toOpenAIResponses(
  tool: Tool,
  options: { strict?: boolean } = {},
): OpenAIResponsesTool {
  const strict = (options.strict ?? true) ? tool.strictParameters : undefined;
  return {
    type: 'function',
    name: tool.name,
    description: tool.description,
    parameters: strict ?? tool.parameters,
    strict: strict !== undefined,
  };
}

/**
 * OpenAI Responses. Listing `GET /tools/openai-responses` (strict forms where a tool has one;
 * `?strict=false` turns it off); `function_call` items (an array, or a response's `output`) →
 * `{items: [{type:"function_call_output", call_id, output}]}` to append to the next input.
 */
export const openaiResponses: Dialect = {
  name: 'openai-responses',
  listingPath: 'openai-responses',
  listing(tools, request) {
    const strict = booleanOption(request, 'strict') ?? true;
    return tools.map((t) => toOpenAIResponses(t, { strict }));
  },
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
