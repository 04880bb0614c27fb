/**
 * The example tool loops, with the real OpenAI and Anthropic SDKs, against a real toolgate
 * and fake model servers that ask for a calculator call and then answer with its result.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../../test/support/stack.ts';
import { ticker } from '../../test/support/tools.ts';
import { runAnthropic } from '../lib/anthropic-loop.ts';
import { callOverMcp } from '../lib/mcp-call.ts';
import { runOpenAIChat } from '../lib/openai-loop.ts';
import type { Toolgate } from '../lib/toolgate.ts';

type Json = Record<string, unknown>;

let stack: Stack;
let model: Server;
let modelUrl: string;
/** What the fake Anthropic model asks for first. */
let firstUse: { name: string; input: Json } = { name: 'calculator', input: { expression: '6*7' } };
/** toolu_1 for the calculator (the tests check it); unique for other calls. */
const toolUseId = () => (firstUse.name === 'calculator' ? 'toolu_1' : `toolu_${Date.now()}`);
/** What the fake OpenAI model asks for first (besides a broken call). */
let firstCall = { name: 'calculator', arguments: '{"expression":"6*7"}' };
const requests: { path: string; body: Json }[] = [];

async function readJson(req: IncomingMessage): Promise<Json> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return JSON.parse(text) as Json;
}

/** OpenAI Chat Completions: first a tool call, then an answer quoting the tool's result. */
function openaiReply(body: Json): Json {
  const messages = body.messages as Json[];
  const toolResult = messages.find((m) => m.role === 'tool');
  const message = toolResult
    ? { role: 'assistant', content: `The answer is ${String(toolResult.content)}.` }
    : {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: `call_${requests.length}_${Date.now()}`,
            type: 'function',
            function: firstCall,
          },
          {
            id: `call_bad_${requests.length}`,
            type: 'function',
            function: { name: 'calculator', arguments: '{"expression":"6*"}' },
          },
        ],
      };
  return {
    id: 'chatcmpl-test',
    object: 'chat.completion',
    created: 0,
    model: String(body.model),
    choices: [
      { index: 0, message, finish_reason: toolResult ? 'stop' : 'tool_calls', logprobs: null },
    ],
  };
}

/** Anthropic Messages: first a tool_use block, then a text answer. */
function anthropicReply(body: Json): Json {
  const last = (body.messages as Json[]).at(-1)!;
  const result = Array.isArray(last.content)
    ? (last.content as Json[]).find((b) => b.type === 'tool_result')
    : undefined;
  return {
    id: 'msg_test',
    type: 'message',
    role: 'assistant',
    model: String(body.model),
    content: result
      ? [{ type: 'text', text: `The answer is ${String(result.content)}.` }]
      : [
          { type: 'text', text: 'Let me calculate.' },
          { type: 'tool_use', id: toolUseId(), ...firstUse },
        ],
    stop_reason: result ? 'end_turn' : 'tool_use',
    stop_sequence: null,
    usage: { input_tokens: 1, output_tokens: 1 },
  };
}

beforeAll(async () => {
  stack = await startStack({
    tools: [ticker],
    config: {
      clients: [{ id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 10_000 } }],
    },
  });
  model = createServer((req, res) => {
    void readJson(req).then((body) => {
      requests.push({ path: req.url ?? '', body });
      const reply = req.url?.endsWith('/messages') ? anthropicReply(body) : openaiReply(body);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(reply));
    });
  });
  await new Promise<void>((resolve) => model.listen(0, '127.0.0.1', resolve));
  modelUrl = `http://127.0.0.1:${(model.address() as { port: number }).port}`;
});
afterAll(async () => {
  model?.close();
  await stack?.close();
});

const toolgate = (): Toolgate => ({
  url: stack.url,
  key: KEYS.alice,
  conversationId: `examples-${Date.now()}`,
});

describe('example tool loops', () => {
  it('OpenAI SDK (and so Ollama): tools from /tools/openai, calls through /v1/tool-calls', async () => {
    requests.length = 0;
    const seen: [string, string][] = [];
    const openai = new OpenAI({ baseURL: `${modelUrl}/v1`, apiKey: 'test' });
    const answer = await runOpenAIChat(openai, {
      toolgate: toolgate(),
      model: 'fake-model',
      prompt: 'What is 6*7?',
      onToolResult: (name, _args, result) => seen.push([name, result]),
    });
    expect(answer).toBe('The answer is 42.');
    expect(requests).toHaveLength(2);
    const tools = requests[0]!.body.tools as { type: string; function: { name: string } }[];
    expect(tools.map((t) => t.function.name)).toContain('calculator');
    expect(tools[0]).toMatchObject({
      type: 'function',
      function: { parameters: { type: 'object' } },
    });
    // The second request carries the assistant turn and one tool message per call.
    const followUp = requests[1]!.body.messages as Json[];
    expect(followUp.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'tool']);
    expect(seen[0]).toEqual(['calculator', '42']);
    expect(seen[1]![1]).toContain('"code":"invalid_expression"');
  });

  it('Anthropic SDK: tools from /tools/anthropic, tool_use → tool_result', async () => {
    requests.length = 0;
    const anthropic = new Anthropic({ baseURL: modelUrl, apiKey: 'test' });
    const seen: string[] = [];
    const answer = await runAnthropic(anthropic, {
      toolgate: toolgate(),
      model: 'fake-claude',
      prompt: 'What is 6*7?',
      onToolResult: (name, _input, result) => seen.push(`${name}=${result}`),
    });
    expect(answer).toBe('The answer is 42.');
    expect(seen).toEqual(['calculator=42']);
    const tools = requests[0]!.body.tools as { name: string; input_schema: Json }[];
    expect(tools.find((t) => t.name === 'calculator')?.input_schema).toMatchObject({
      type: 'object',
    });
    const last = (requests[1]!.body.messages as Json[]).at(-1)!;
    expect(last).toEqual({
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '42' }],
    });
  });

  it('live: a long call’s output shows while it runs, then the model gets its result', async () => {
    firstCall = { name: 'ticker', arguments: '{"n":3,"ms":1000}' };
    const lines: [string, number][] = [];
    const seen: string[] = [];
    try {
      const answer = await runOpenAIChat(
        new OpenAI({ baseURL: `${modelUrl}/v1`, apiKey: 'test' }),
        {
          toolgate: toolgate(),
          model: 'fake-model',
          prompt: 'Tick three times',
          live: { onOutput: (tool, _stream, text) => lines.push([`${tool}: ${text}`, Date.now()]) },
          onToolResult: (name, _args, result) => seen.push(`${name}=${result}`),
        },
      );
      expect(lines.map(([l]) => l)).toEqual([
        'ticker: tick 1\n',
        'ticker: tick 2\n',
        'ticker: tick 3\n',
      ]);
      // Live: the ticks (a second apart) arrived apart, not all at the end.
      expect(lines[2]![1] - lines[0]![1]).toBeGreaterThan(1000);
      // The bridge answered with the result of the call that ran, not a second run.
      expect(seen[0]).toBe('ticker={"ticks":3}');
      expect(answer).toBe('The answer is {"ticks":3}.');
    } finally {
      firstCall = { name: 'calculator', arguments: '{"expression":"6*7"}' };
    }
  });

  it('live: a signal cancels the running call and the model reads that it was cancelled', async () => {
    firstCall = { name: 'ticker', arguments: '{"n":100,"ms":200}' };
    const stop = new AbortController();
    const seen: string[] = [];
    try {
      await runOpenAIChat(new OpenAI({ baseURL: `${modelUrl}/v1`, apiKey: 'test' }), {
        toolgate: toolgate(),
        model: 'fake-model',
        prompt: 'Tick for a long time',
        live: { signal: stop.signal, onOutput: () => stop.abort() },
        onToolResult: (name, _args, result) => seen.push(`${name}=${result}`),
      });
      expect(seen[0]).toContain('"code":"cancelled"');
    } finally {
      firstCall = { name: 'calculator', arguments: '{"expression":"6*7"}' };
    }
  });

  it('live with Anthropic: output while the call runs; a signal cancels it', async () => {
    firstUse = { name: 'ticker', input: { n: 100, ms: 200 } };
    const anthropic = new Anthropic({ baseURL: modelUrl, apiKey: 'test' });
    const stop = new AbortController();
    const lines: string[] = [];
    const seen: string[] = [];
    try {
      await runAnthropic(anthropic, {
        toolgate: toolgate(),
        model: 'fake-claude',
        prompt: 'Tick for a long time',
        live: {
          signal: stop.signal,
          onOutput: (tool, _stream, text) => {
            lines.push(`${tool}: ${text}`);
            if (lines.length === 2) stop.abort();
          },
        },
        onToolResult: (name, _input, result) => seen.push(`${name}=${result}`),
      });
      expect(lines.slice(0, 2)).toEqual(['ticker: tick 1\n', 'ticker: tick 2\n']);
      expect(seen[0]).toContain('"code":"cancelled"');
    } finally {
      firstUse = { name: 'calculator', input: { expression: '6*7' } };
    }
  });

  it('MCP: output as log messages while the call runs; aborting cancels it', async () => {
    const lines: string[] = [];
    const done = await callOverMcp(
      toolgate(),
      'ticker',
      { n: 3, ms: 300 },
      { onOutput: (level, text) => lines.push(`${level} ${text}`) },
    );
    expect(lines).toEqual(['info tick 1', 'info tick 2', 'info tick 3']);
    expect(done).toMatchObject({ cancelled: false, isError: false, text: '{"ticks":3}' });

    const stop = new AbortController();
    const cancelled = await callOverMcp(
      toolgate(),
      'ticker',
      { n: 100, ms: 200 },
      { onOutput: () => stop.abort(), signal: stop.signal },
    );
    expect(cancelled).toEqual({ cancelled: true });
    // toolgate heard the MCP cancel: the call ended cancelled, not after its 20 s.
    let status = '';
    for (let i = 0; i < 50 && status !== 'cancelled'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const stats = (await (
        await fetch(`${stack.url}/v1/stats`, { headers: { authorization: `Bearer ${KEYS.alice}` } })
      ).json()) as { recent: { tool: string; status: string }[] };
      status = stats.recent.find((c) => c.tool === 'ticker')?.status ?? '';
    }
    expect(status).toBe('cancelled');
  });
});
