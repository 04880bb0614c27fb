/**
 * examples/code-mode.ts's loop with the real OpenAI SDK against a real toolgate running code
 * mode (sandbox, gateway, worker) and a fake model that writes one script calling the
 * calculator five times, then answers with what the script printed.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCodeModeStack, whyNoCodeMode } from '../../test/support/code-mode-stack.ts';
import { KEYS } from '../../test/support/stack.ts';
import { runOpenAIChat } from '../lib/openai-loop.ts';

type Json = Record<string, unknown>;

const SCRIPT = `total = sum(toolgate.calculator(expression=f"{i}**2") for i in range(1, 6))
print(f"sum of squares 1..5 = {total}")`;

async function readJson(req: IncomingMessage): Promise<Json> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return JSON.parse(text) as Json;
}

const reason = await whyNoCodeMode();
if (reason) console.warn(`code-mode example: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('the code-mode example loop', () => {
  let started: Awaited<ReturnType<typeof startCodeModeStack>>;
  let model: Server;
  let modelUrl: string;
  const requests: Json[] = [];
  beforeAll(async () => {
    started = await startCodeModeStack({
      config: {
        clients: [{ id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 10_000 } }],
      },
    });
    model = createServer((req, res) => {
      void readJson(req).then((body) => {
        requests.push(body);
        const tool = (body.messages as Json[]).find((m) => m.role === 'tool');
        const message = tool
          ? {
              role: 'assistant',
              content: `Done: ${(JSON.parse(String(tool.content)) as { stdout: string }).stdout.trim()}`,
            }
          : {
              role: 'assistant',
              content: null,
              tool_calls: [
                {
                  id: `call_${Date.now()}`,
                  type: 'function',
                  function: {
                    name: 'run_code_with_tools',
                    arguments: JSON.stringify({ code: SCRIPT }),
                  },
                },
              ],
            };
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            id: 'chatcmpl-test',
            object: 'chat.completion',
            created: 0,
            model: String(body.model),
            choices: [
              { index: 0, message, finish_reason: tool ? 'stop' : 'tool_calls', logprobs: null },
            ],
          }),
        );
      });
    });
    await new Promise<void>((resolve) => model.listen(0, '127.0.0.1', resolve));
    modelUrl = `http://127.0.0.1:${(model.address() as { port: number }).port}`;
  }, 120_000);
  afterAll(async () => {
    model?.close();
    await started?.close();
  });

  it('the model gets one tool, writes one script, and reads one line back', async () => {
    const answer = await runOpenAIChat(new OpenAI({ baseURL: `${modelUrl}/v1`, apiKey: 'test' }), {
      toolgate: { url: started.stack.url, key: KEYS.alice, conversationId: `cm-${Date.now()}` },
      model: 'fake-model',
      prompt: 'What is the sum of the squares of 1 to 5?',
      only: ['run_code_with_tools'],
    });
    expect(answer).toBe('Done: sum of squares 1..5 = 55');
    const tools = requests[0]!.tools as { function: { name: string; description: string } }[];
    expect(tools.map((t) => t.function.name)).toEqual(['run_code_with_tools']);
    // The description names the functions the script may call.
    expect(tools[0]!.function.description).toContain('- calculator:');
  });
});
