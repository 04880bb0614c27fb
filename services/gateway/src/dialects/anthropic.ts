import type { Tool } from '@toolgate/registry';
import { ApiError } from '../errors.js';
import { isRecord, slotContent, str } from './content.js';
import { choiceOption, toolSelection } from './listing.js';
import type { BridgeCall, Dialect, ListingRequest } from './types.js';

export interface AnthropicCacheControl {
  type: 'ephemeral';
  ttl?: '5m' | '1h';
}

/** A Messages API client tool. */
export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: { type: 'object'; [key: string]: unknown };
  /** Left out of the prompt until the model's tool search finds it. */
  defer_loading?: true;
  cache_control?: AnthropicCacheControl;
}

/** Anthropic's server-side tool search, which finds the deferred tools. */
export type AnthropicToolSearchTool = (
  | { type: 'tool_search_tool_regex_20251119'; name: 'tool_search_tool_regex' }
  | { type: 'tool_search_tool_bm25_20251119'; name: 'tool_search_tool_bm25' }
) & { cache_control?: AnthropicCacheControl };

export interface AnthropicListingOptions {
  /** Which tools get `defer_loading: true`. */
  defer?: (tool: Tool) => boolean;
  /** Put Anthropic's tool search tool first in the list. */
  toolSearch?: 'regex' | 'bm25';
  /** A cache breakpoint on the last tool that is loaded up front. */
  cacheControl?: AnthropicCacheControl;
}

export function toAnthropic(tool: Tool, defer = false): AnthropicTool {
  return {
    name: tool.name,
    description: tool.description,
    input_schema: tool.parameters as AnthropicTool['input_schema'],
    ...(defer ? { defer_loading: true as const } : {}),
  };
}

/**
 * The `tools` array. The cache breakpoint goes on the last tool that is part of the prompt:
 * the tools before it, in their stable order, are the cached prefix, and a deferred tool is
 * not in the prompt at all (it is loaded when the tool search returns it).
 */
export function anthropicListing(
  tools: readonly Tool[],
  options: AnthropicListingOptions = {},
): (AnthropicTool | AnthropicToolSearchTool)[] {
  const list: (AnthropicTool | AnthropicToolSearchTool)[] = [];
  if (options.toolSearch) list.push(TOOL_SEARCH[options.toolSearch]());
  for (const tool of tools) list.push(toAnthropic(tool, options.defer?.(tool) ?? false));
  if (options.cacheControl && list.length > 0) {
    const last = list.findLastIndex((t) => !('defer_loading' in t));
    if (last < 0) {
      throw new ApiError(
        'invalid_request',
        '"cache_control" needs a tool that is not deferred: add tool_search=regex (or bm25), or defer fewer tools',
      );
    }
    list[last] = { ...list[last]!, cache_control: options.cacheControl };
  }
  return list;
}

const TOOL_SEARCH = {
  regex: (): AnthropicToolSearchTool => ({
    type: 'tool_search_tool_regex_20251119',
    name: 'tool_search_tool_regex',
  }),
  bm25: (): AnthropicToolSearchTool => ({
    type: 'tool_search_tool_bm25_20251119',
    name: 'tool_search_tool_bm25',
  }),
};

/**
 * `?defer_loading=` tools to defer (`*`, names, `category:<name>`, comma-separated);
 * `?tool_search=regex|bm25`; `?cache_control=ephemeral` with `?ttl=5m|1h`.
 */
function listingOptions(request: ListingRequest): AnthropicListingOptions {
  const defer = toolSelection(request, 'defer_loading');
  const toolSearch = choiceOption(request, 'tool_search', ['regex', 'bm25'] as const);
  const cache = choiceOption(request, 'cache_control', ['ephemeral'] as const);
  const ttl = choiceOption(request, 'ttl', ['5m', '1h'] as const);
  if (ttl && !cache)
    throw new ApiError(
      'invalid_request',
      '"ttl" is the cache breakpoint\'s lifetime: add cache_control=ephemeral',
    );
  return {
    ...(defer ? { defer } : {}),
    ...(toolSearch ? { toolSearch } : {}),
    ...(cache ? { cacheControl: { type: cache, ...(ttl ? { ttl } : {}) } } : {}),
  };
}

/**
 * Anthropic Messages. Listing `GET /tools/anthropic` (tool search and prompt-cache options
 * above); `tool_use` blocks (an assistant message or response `content`, or an array of
 * blocks) → `{messages: [{role:"user", content: [tool_result…]}]}`.
 */
export const anthropic: Dialect = {
  name: 'anthropic',
  listingPath: 'anthropic',
  listing(tools, request) {
    return anthropicListing(tools, listingOptions(request));
  },
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
