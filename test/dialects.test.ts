import { DIALECTS } from '@toolgate/gateway';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { counter, testTools } from './support/tools.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ tools: testTools });
});
afterAll(async () => {
  await stack?.close();
});

async function bridge(body: unknown, key: string = KEYS.alice) {
  const res = await stack.call('/v1/tool-calls', { json: body, key });
  return { status: res.status, body: await res.json() };
}

describe('OpenAI Chat Completions', () => {
  it('an assistant message with tool_calls yields role:"tool" messages with the same ids', async () => {
    const message = {
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          id: 'call_abc123',
          type: 'function',
          function: { name: 'calculator', arguments: '{"expression":"2+2"}' },
        },
      ],
    };
    const { status, body } = await bridge(message);
    expect(status).toBe(200);
    expect(body).toEqual({
      dialect: 'openai-chat',
      messages: [{ role: 'tool', tool_call_id: 'call_abc123', content: '4' }],
    });
  });

  it('a malformed arguments string gets an error in its slot while the others succeed', async () => {
    const { status, body } = await bridge({
      tool_calls: [
        {
          id: 'call_1',
          type: 'function',
          function: { name: 'calculator', arguments: '{"expression":"1+1"}' },
        },
        {
          id: 'call_2',
          type: 'function',
          function: { name: 'calculator', arguments: '{"expression": "1+' },
        },
        {
          id: 'call_3',
          type: 'function',
          function: { name: 'calculator', arguments: '{"expr":"1"}' },
        },
        { id: 'call_4', type: 'function', function: { name: 'no_such_tool', arguments: '{}' } },
        { id: 'call_5', type: 'function', function: { name: 'current_time', arguments: '' } },
      ],
    });
    expect(status).toBe(200);
    const [ok, malformed, invalid, unknown, noArgs] = body.messages;
    expect(ok).toEqual({ role: 'tool', tool_call_id: 'call_1', content: '2' });
    expect(malformed.tool_call_id).toBe('call_2');
    expect(JSON.parse(malformed.content)).toEqual({
      error: { code: 'invalid_json', message: expect.stringContaining('not valid JSON') },
    });
    expect(JSON.parse(invalid.content).error).toMatchObject({
      code: 'invalid_arguments',
      message: expect.stringContaining('expr'),
    });
    expect(JSON.parse(unknown.content).error.code).toBe('unknown_tool');
    expect(JSON.parse(noArgs.content).timezone).toBe('UTC');
  });

  it('accepts a whole chat completion (choices[0].message) and runs calls in parallel', async () => {
    const started = Date.now();
    const { body } = await bridge({
      choices: [
        {
          message: {
            role: 'assistant',
            tool_calls: [1, 2, 3].map((i) => ({
              id: `c${i}`,
              type: 'function',
              function: { name: 'sleep', arguments: '{"ms":1000}' },
            })),
          },
        },
      ],
    });
    expect(body.messages.map((m: { content: string }) => JSON.parse(m.content))).toEqual([
      { slept: 1000 },
      { slept: 1000 },
      { slept: 1000 },
    ]);
    // In parallel: one after another they would take 3 s.
    expect(Date.now() - started).toBeLessThan(2500);
  });

  it('a tool failure is readable in its slot', async () => {
    const { body } = await bridge({
      tool_calls: [
        { id: 'x', type: 'function', function: { name: 'explode', arguments: '{"how":"error"}' } },
      ],
    });
    expect(JSON.parse(body.messages[0].content)).toEqual({
      error: { code: 'tool_error', message: 'explode failed: kaboom' },
    });
  });

  it('the tool call id is the idempotency key: a resent message does not run tools again', async () => {
    counter.runs = 0;
    const message = {
      tool_calls: [
        { id: 'call_once', type: 'function', function: { name: 'count_runs', arguments: '{}' } },
      ],
    };
    const first = await bridge(message);
    const second = await bridge(message);
    expect(first.body.messages[0].content).toBe('1');
    expect(second.body).toEqual(first.body);
    expect(counter.runs).toBe(1);
  });

  it('a call outside the scope is refused in its slot', async () => {
    const { status, body } = await bridge(
      {
        tool_calls: [
          { id: 'a', type: 'function', function: { name: 'count_runs', arguments: '{}' } },
        ],
      },
      KEYS.bob,
    );
    expect(status).toBe(200);
    expect(JSON.parse(body.messages[0].content).error.code).toBe('forbidden');
  });
});

describe('OpenAI Responses', () => {
  it('function_call items yield function_call_output items', async () => {
    const { body } = await bridge({
      output: [
        { type: 'reasoning', id: 'rs_1', summary: [] },
        {
          type: 'function_call',
          id: 'fc_1',
          call_id: 'call_r1',
          name: 'calculator',
          arguments: '{"expression":"3*3"}',
        },
        {
          type: 'function_call',
          id: 'fc_2',
          call_id: 'call_r2',
          name: 'calculator',
          arguments: 'not json',
        },
      ],
    });
    expect(body.dialect).toBe('openai-responses');
    expect(body.items[0]).toEqual({
      type: 'function_call_output',
      call_id: 'call_r1',
      output: '9',
    });
    expect(body.items[1].call_id).toBe('call_r2');
    expect(JSON.parse(body.items[1].output).error.code).toBe('invalid_json');
  });

  it('accepts a bare array of items', async () => {
    const { body } = await bridge([
      {
        type: 'function_call',
        call_id: 'call_r3',
        name: 'calculator',
        arguments: '{"expression":"1"}',
      },
    ]);
    expect(body.items).toEqual([{ type: 'function_call_output', call_id: 'call_r3', output: '1' }]);
  });
});

describe('Anthropic Messages', () => {
  it('tool_use blocks yield tool_result blocks, is_error on failure', async () => {
    const { body } = await bridge({
      role: 'assistant',
      content: [
        { type: 'text', text: 'Let me compute that.' },
        { type: 'tool_use', id: 'toolu_01', name: 'calculator', input: { expression: '10/4' } },
        { type: 'tool_use', id: 'toolu_02', name: 'explode', input: { how: 'tool_error' } },
        { type: 'tool_use', id: 'toolu_03', name: 'calculator', input: { expression: 7 } },
      ],
    });
    expect(body.dialect).toBe('anthropic');
    expect(body.messages).toHaveLength(1);
    const [ok, failed, invalid] = body.messages[0].content;
    expect(body.messages[0].role).toBe('user');
    expect(ok).toEqual({ type: 'tool_result', tool_use_id: 'toolu_01', content: '2.5' });
    expect(failed).toMatchObject({ type: 'tool_result', tool_use_id: 'toolu_02', is_error: true });
    expect(JSON.parse(failed.content).error.code).toBe('upstream_down');
    expect(invalid).toMatchObject({ tool_use_id: 'toolu_03', is_error: true });
  });
});

describe('bad bridge requests', () => {
  it.each([
    [{ hello: 'world' }, 'invalid_request'],
    [{ role: 'assistant', content: 'just text' }, 'invalid_request'],
    [[], 'invalid_request'],
  ])('%j → 400 %s', async (body, code) => {
    const res = await bridge(body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe(code);
  });

  it('non-JSON is 400 invalid_json', async () => {
    const res = await bridge('{oops');
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_json');
  });

  it('an unknown ?dialect is named in the error', async () => {
    const res = await stack.call('/v1/tool-calls?dialect=gemini', { json: { tool_calls: [] } });
    expect(res.status).toBe(400);
    expect((await res.json()).error.message).toContain('gemini');
  });
});

describe('the dialect table', () => {
  it('has unique names and listing paths', () => {
    expect(new Set(DIALECTS.map((d) => d.name)).size).toBe(DIALECTS.length);
    expect(new Set(DIALECTS.map((d) => d.listingPath)).size).toBe(DIALECTS.length);
  });

  it.each(DIALECTS.map((d) => [d.name, d] as const))(
    '%s has a listing route holding the native list, and is a ?dialect= name',
    async (_, dialect) => {
      const native = (await (await stack.call('/tools')).json()) as { name: string }[];
      const res = await stack.call(`/tools/${dialect.listingPath}`);
      expect(res.status).toBe(200);
      const listed = (await res.json()) as unknown[];
      expect(listed).toHaveLength(native.length);
      // each entry names its tool, in the native list's order
      listed.forEach((entry, i) => expect(JSON.stringify(entry)).toContain(`"${native[i]!.name}"`));

      const bridged = await stack.call(`/v1/tool-calls?dialect=${dialect.name}`, {
        json: { nothing: 'here' },
      });
      expect(bridged.status).toBe(400);
      const { error } = (await bridged.json()) as { error: { message: string } };
      expect(error.message).toContain('no tool calls found');
    },
  );
});
