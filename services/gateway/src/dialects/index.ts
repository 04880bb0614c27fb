import { anthropic } from './anthropic.js';
import { openaiChat } from './openai-chat.js';
import { openaiResponses } from './openai-responses.js';
import type { Dialect } from './types.js';

export const DIALECTS: readonly Dialect[] = [openaiChat, openaiResponses, anthropic];

export function dialectNamed(name: string): Dialect | undefined {
  return DIALECTS.find((d) => d.name === name);
}

export type { BridgeCall, BridgeSlot, Dialect } from './types.js';
