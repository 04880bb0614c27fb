/**
 * A tool's declared precheck is the one home of its argument policy: the gateway runs it for
 * every dialect before anything is queued, and the worker runs it again before the handler.
 */
import { Type, ToolError, defineTool, type Tool } from '@toolgate/registry';
import { createToolRegistry } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runTool } from '../services/worker/src/run-tool.js';
import { startStack, type Stack } from './support/stack.js';

let handled = 0;
const evenOnly = defineTool({
  name: 'even_only',
  description: 'Doubles an even number; its precheck refuses odd ones',
  category: 'test',
  parameters: Type.Object({ n: Type.Integer() }),
  precheck: ({ n }, { clientId }) => {
    if (n % 2 !== 0) throw new ToolError('odd_number', `${n} is odd (asked by ${clientId})`);
  },
  handler: ({ n }) => {
    handled++;
    return n * 2;
  },
});

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ tools: [evenOnly] });
});
afterAll(async () => {
  await stack?.close();
});

describe('declared prechecks', () => {
  it('the gateway refuses with the precheck error as an outcome, and the handler never runs', async () => {
    const before = handled;
    const refused = await stack.call('/tools/even_only/execute', { json: { n: 3 } });
    expect(refused.status).toBe(200);
    expect(await refused.json()).toMatchObject({
      status: 'error',
      error: { code: 'odd_number', message: '3 is odd (asked by alice)' },
    });
    const ok = await stack.call('/tools/even_only/execute', { json: { n: 4 } });
    expect(await ok.json()).toMatchObject({ status: 'ok', result: 8 });
    expect(handled).toBe(before + 1);
  });

  it('applies to the dialect bridge, slot by slot', async () => {
    const res = await stack.call('/v1/tool-calls', {
      json: {
        tool_calls: [
          { id: 'p1', type: 'function', function: { name: 'even_only', arguments: '{"n":1}' } },
          { id: 'p2', type: 'function', function: { name: 'even_only', arguments: '{"n":2}' } },
        ],
      },
    });
    const body = (await res.json()) as { messages: { tool_call_id: string; content: string }[] };
    expect(body.messages.find((m) => m.tool_call_id === 'p1')?.content).toContain('odd_number');
    expect(body.messages.find((m) => m.tool_call_id === 'p2')?.content).toBe('4');
  });

  it('the worker runs it again before the handler (a job from anywhere else)', async () => {
    const tool = createToolRegistry([evenOnly]).get('even_only') as Tool;
    const before = handled;
    const outcome = await runTool(
      tool,
      { id: 'c1', tool: 'even_only', args: { n: 5 }, clientId: 'bob', acceptedAt: Date.now() },
      {} as never,
      new AbortController().signal,
    );
    expect(outcome).toMatchObject({
      status: 'error',
      error: { code: 'odd_number', message: '5 is odd (asked by bob)' },
    });
    expect(handled).toBe(before);
  });
});
