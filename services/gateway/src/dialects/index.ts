import { anthropic } from './anthropic.js';
import { openaiChat } from './openai-chat.js';
import { openaiResponses } from './openai-responses.js';
import type { Dialect } from './types.js';

/**
 * Every provider dialect, one line each (docs/dialects.md). Order matters only to
 * auto-detection on POST /v1/tool-calls: the first dialect that finds tool calls in a body
 * answers it.
 */
export const DIALECTS: readonly Dialect[] = [openaiChat, openaiResponses, anthropic];

export function dialectNamed(name: string): Dialect | undefined {
  return DIALECTS.find((d) => d.name === name);
}

export type { BridgeCall, BridgeSlot, Dialect, ListingRequest } from './types.js';
export type { OpenAIChatTool } from './openai-chat.js';
export type { OpenAIResponsesTool } from './openai-responses.js';
export type { AnthropicCacheControl, AnthropicTool, AnthropicToolSearchTool } from './anthropic.js';
