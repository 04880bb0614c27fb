// Type-level: what toolgate lists can be handed to the official SDKs as-is.
import type Anthropic from '@anthropic-ai/sdk';
import type {
  AnthropicTool,
  AnthropicToolSearchTool,
  OpenAIChatTool,
  OpenAIResponsesTool,
} from '@toolgate/gateway';
import type OpenAI from 'openai';
import { describe, expectTypeOf, it } from 'vitest';

describe('listed tools fit the SDK types', () => {
  it('OpenAI chat completions tools', () => {
    expectTypeOf<OpenAIChatTool>().toExtend<OpenAI.Chat.Completions.ChatCompletionTool>();
    expectTypeOf<OpenAIChatTool>().toExtend<OpenAI.Chat.Completions.ChatCompletionFunctionTool>();
    expectTypeOf<OpenAIChatTool[]>().toExtend<
      OpenAI.Chat.Completions.ChatCompletionCreateParams['tools']
    >();
  });

  it('OpenAI Responses function tools', () => {
    expectTypeOf<OpenAIResponsesTool>().toExtend<OpenAI.Responses.FunctionTool>();
    expectTypeOf<OpenAIResponsesTool[]>().toExtend<
      OpenAI.Responses.ResponseCreateParams['tools']
    >();
  });

  it('Anthropic messages tools, with the tool search tool', () => {
    expectTypeOf<AnthropicTool>().toExtend<Anthropic.Messages.Tool>();
    expectTypeOf<(AnthropicTool | AnthropicToolSearchTool)[]>().toExtend<
      Anthropic.Messages.MessageCreateParams['tools']
    >();
  });

  it('a response body parsed as the SDK type is usable by each', () => {
    const openaiTools: OpenAI.Chat.Completions.ChatCompletionTool[] = [] as OpenAIChatTool[];
    const responsesTools: OpenAI.Responses.Tool[] = [] as OpenAIResponsesTool[];
    const anthropicTools: Anthropic.Messages.ToolUnion[] = [] as (
      AnthropicTool | AnthropicToolSearchTool
    )[];
    expectTypeOf(openaiTools).not.toBeAny();
    expectTypeOf(responsesTools).not.toBeAny();
    expectTypeOf(anthropicTools).not.toBeAny();
  });
});
