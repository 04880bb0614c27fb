/**
 * A complete tool loop with the Anthropic SDK's Messages API: ask Claude, run its tool_use
 * blocks through toolgate, send back the tool_result blocks, repeat until it stops for good.
 */
import type Anthropic from '@anthropic-ai/sdk';
import { fetchTools, runLive, runToolCalls, type LiveCalls, type Toolgate } from './toolgate.ts';

export interface AnthropicLoopOptions {
  toolgate: Toolgate;
  model: string;
  prompt: string;
  system?: string;
  maxTokens?: number;
  maxTurns?: number;
  onToolResult?: (name: string, input: unknown, result: string) => void;
  /** Show long calls' output as it comes, and cancel them on a signal (lib/toolgate.ts). */
  live?: LiveCalls;
}

export async function runAnthropic(
  anthropic: Anthropic,
  options: AnthropicLoopOptions,
): Promise<string> {
  const { toolgate, model, maxTurns = 8 } = options;
  const tools = await fetchTools<Anthropic.Tool>(toolgate, 'anthropic');
  const messages: Anthropic.MessageParam[] = [{ role: 'user', content: options.prompt }];
  for (let turn = 0; turn < maxTurns; turn++) {
    const response = await anthropic.messages.create({
      model,
      max_tokens: options.maxTokens ?? 1024,
      ...(options.system ? { system: options.system } : {}),
      tools,
      messages,
    });
    messages.push({ role: 'assistant', content: response.content });
    const uses = response.content.filter((b) => b.type === 'tool_use');
    if (response.stop_reason !== 'tool_use' || uses.length === 0) {
      return response.content
        .filter((b) => b.type === 'text')
        .map((b) => b.text)
        .join('');
    }
    if (options.live) {
      const calls = uses.map((u) => ({ id: u.id, name: u.name, args: u.input }));
      await runLive(toolgate, calls, options.live);
    }
    // One user message with a tool_result block per tool_use (is_error set on failures).
    const { messages: results } = await runToolCalls<Anthropic.MessageParam>(toolgate, {
      content: response.content,
    });
    for (const message of results) {
      for (const block of Array.isArray(message.content) ? message.content : []) {
        if (block.type !== 'tool_result') continue;
        const use = uses.find((u) => u.id === block.tool_use_id);
        if (use) options.onToolResult?.(use.name, use.input, String(block.content));
      }
    }
    messages.push(...results);
  }
  throw new Error(`no answer after ${maxTurns} turns`);
}
