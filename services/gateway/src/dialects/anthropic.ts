import { isRecord, slotContent, str } from './content.js';
import type { BridgeCall, Dialect } from './types.js';

/**
 * Anthropic Messages: `tool_use` blocks (an assistant message or response `content`, or an
 * array of blocks) → `{messages: [{role:"user", content: [tool_result…]}]}`.
 */
export const anthropic: Dialect = {
  name: 'anthropic',
  extract(body) {
    const blocks = Array.isArray(body)
      ? body
      : Array.isArray(body.content)
        ? body.content
        : undefined;
    if (!blocks) return undefined;
    const uses = blocks.filter((b) => isRecord(b) && b.type === 'tool_use') as Record<
      string,
      unknown
    >[];
    if (uses.length === 0) return undefined;
    return uses.map((b, i): BridgeCall => ({
      callId: str(b.id) || `toolu_${i}`,
      modelId: str(b.id) !== '',
      name: str(b.name),
      args: isRecord(b.input)
        ? { ok: true, value: b.input }
        : b.input === undefined
          ? { ok: true, value: {} }
          : { ok: false, message: 'input must be a JSON object' },
    }));
  },
  format(slots) {
    return {
      messages: [
        {
          role: 'user',
          content: slots.map((slot) => {
            const { text, isError } = slotContent(slot);
            return {
              type: 'tool_result',
              tool_use_id: slot.call.callId,
              content: text,
              ...(isError ? { is_error: true } : {}),
            };
          }),
        },
      ],
    };
  },
};
