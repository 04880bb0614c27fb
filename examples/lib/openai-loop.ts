/**
 * A complete tool loop with the OpenAI SDK's Chat Completions, for OpenAI and for any
 * OpenAI-compatible endpoint (Ollama, vLLM, LM Studio, …): ask the model, run its tool calls
 * through toolgate, append the results, repeat until it answers in words.
 */
import type OpenAI from 'openai';
import type {
  ChatCompletionMessageParam,
  ChatCompletionTool,
  ChatCompletionToolMessageParam,
} from 'openai/resources/chat/completions';
import { fetchTools, runLive, runToolCalls, type LiveCalls, type Toolgate } from './toolgate.ts';

export interface LoopOptions {
  toolgate: Toolgate;
  model: string;
  prompt: string;
  system?: string;
  /** Model turns before giving up (each may call several tools). */
  maxTurns?: number;
  /** Called with each tool call and its result, for printing. */
  onToolResult?: (name: string, args: string, result: string) => void;
  /** Show long calls' output as it comes, and cancel them on a signal (lib/toolgate.ts). */
  live?: LiveCalls;
  /** Offer the model only these tools (e.g. `['run_code_with_tools']` for code mode). */
  only?: readonly string[];
}

export async function runOpenAIChat(openai: OpenAI, options: LoopOptions): Promise<string> {
  const { toolgate, model, maxTurns = 8 } = options;
  const listed = await fetchTools<ChatCompletionTool>(toolgate, 'openai');
  const tools = options.only
    ? listed.filter((t) => t.type === 'function' && options.only!.includes(t.function.name))
    : listed;
  const messages: ChatCompletionMessageParam[] = [
    ...(options.system ? [{ role: 'system' as const, content: options.system }] : []),
    { role: 'user', content: options.prompt },
  ];
  for (let turn = 0; turn < maxTurns; turn++) {
    const completion = await openai.chat.completions.create({ model, messages, tools });
    const message = completion.choices[0]?.message;
    if (!message) throw new Error('the model returned no choice');
    messages.push(message);
    if (!message.tool_calls?.length) return message.content ?? '';
    if (options.live) {
      const calls = message.tool_calls.flatMap((c) =>
        c.type === 'function'
          ? [{ id: c.id, name: c.function.name, args: parseArguments(c.function.arguments) }]
          : [],
      );
      await runLive(toolgate, calls, options.live);
    }
    // toolgate runs every call of the turn in parallel; the tool call id is the idempotency key.
    const { messages: results } = await runToolCalls<ChatCompletionToolMessageParam>(
      toolgate,
      message,
    );
    for (const result of results) {
      const call = message.tool_calls.find((c) => c.id === result.tool_call_id);
      if (call?.type === 'function') {
        options.onToolResult?.(call.function.name, call.function.arguments, String(result.content));
      }
    }
    messages.push(...results);
  }
  throw new Error(`no answer after ${maxTurns} turns`);
}

/** The model's arguments string as JSON; unparseable text is sent as it is (toolgate reports it). */
function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
