// Type-level: what toolgate renders can be handed to the official SDKs as-is.
import type Anthropic from '@anthropic-ai/sdk';
import type { AnthropicTool, OpenAITool } from '@toolgate/registry';
import { toAnthropic, toOpenAI } from '@toolgate/registry';
import type OpenAI from 'openai';
import { describe, expectTypeOf, it } from 'vitest';

describe('rendered tools fit the SDK types', () => {
  it('OpenAI chat completions tools', () => {
    expectTypeOf<OpenAITool>().toExtend<OpenAI.Chat.Completions.ChatCompletionTool>();
    expectTypeOf<OpenAITool>().toExtend<OpenAI.Chat.Completions.ChatCompletionFunctionTool>();
    expectTypeOf<ReturnType<typeof toOpenAI>[]>().toExtend<
      OpenAI.Chat.Completions.ChatCompletionCreateParams['tools']
    >();
  });

  it('Anthropic messages tools', () => {
    expectTypeOf<AnthropicTool>().toExtend<Anthropic.Messages.Tool>();
    expectTypeOf<ReturnType<typeof toAnthropic>[]>().toExtend<
      Anthropic.Messages.MessageCreateParams['tools']
    >();
  });

  it('a response body parsed as the SDK type is usable by both', () => {
    const openaiTools: OpenAI.Chat.Completions.ChatCompletionTool[] = [] as OpenAITool[];
    const anthropicTools: Anthropic.Messages.Tool[] = [] as AnthropicTool[];
    expectTypeOf(openaiTools).not.toBeAny();
    expectTypeOf(anthropicTools).not.toBeAny();
  });
});
