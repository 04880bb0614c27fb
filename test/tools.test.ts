import { Type, defineTool } from '@toolgate/registry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

// The seed example: register a tool, and GET /tools/openai lists it in exactly OpenAI's shape.
const getWeather = defineTool({
  name: 'get_weather',
  description: 'Get the current weather for a city',
  category: 'web',
  parameters: Type.Object({
    city: Type.String({ description: 'City name, e.g. "Paris"' }),
    units: Type.Optional(Type.Union([Type.Literal('celsius'), Type.Literal('fahrenheit')])),
  }),
  handler: ({ city, units }) => ({ city, units: units ?? 'celsius', temperature: 21 }),
});

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ tools: [getWeather] });
});
afterAll(async () => {
  await stack?.close();
});

const get = async (path: string, key: string = KEYS.alice) => {
  const res = await stack.call(path, { key });
  return { status: res.status, body: await res.json() };
};

describe('GET /tools/openai', () => {
  it('returns exactly {"type":"function","function":{"name","description","parameters"}} entries', async () => {
    const { status, body } = await get('/tools/openai');
    expect(status).toBe(200);
    for (const entry of body) {
      expect(Object.keys(entry).sort()).toEqual(['function', 'type']);
      expect(entry.type).toBe('function');
      expect(Object.keys(entry.function).sort()).toEqual(['description', 'name', 'parameters']);
    }
    expect(
      body.find((t: { function: { name: string } }) => t.function.name === 'get_weather'),
    ).toEqual({
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Get the current weather for a city',
        parameters: {
          type: 'object',
          properties: {
            city: { type: 'string', description: 'City name, e.g. "Paris"' },
            units: {
              anyOf: [
                { const: 'celsius', type: 'string' },
                { const: 'fahrenheit', type: 'string' },
              ],
            },
          },
          required: ['city'],
          additionalProperties: false,
        },
      },
    });
  });

  it('?strict=true gives strict-mode schemas', async () => {
    const { body } = await get('/tools/openai?strict=true&q=weather&limit=1');
    expect(body).toHaveLength(1);
    expect(body[0].function).toMatchObject({
      name: 'get_weather',
      strict: true,
      parameters: { required: ['city', 'units'], additionalProperties: false },
    });
  });

  it('a strict-mode model sending null for an optional field still validates', async () => {
    const res = await stack.call('/tools/get_weather/execute', {
      json: { city: 'Paris', units: null },
    });
    expect(await res.json()).toMatchObject({
      status: 'ok',
      result: { city: 'Paris', units: 'celsius' },
    });
  });

  it('?q ranks by relevance, ?category filters, ?limit cuts', async () => {
    expect((await get('/tools/openai?q=weather')).body[0].function.name).toBe('get_weather');
    expect((await get('/tools/openai?q=arithmetic%20expression')).body[0].function.name).toBe(
      'calculator',
    );
    expect(
      (await get('/tools/openai?category=time')).body.map(
        (t: { function: { name: string } }) => t.function.name,
      ),
    ).toEqual(['current_time']);
    expect((await get('/tools/openai?limit=1')).body).toHaveLength(1);
    expect((await get('/tools/openai?q=zzzzqqqq')).body).toEqual([]);
  });

  it('bad filters are 400 invalid_request', async () => {
    for (const q of ['limit=0', 'limit=abc', 'strict=yes', 'q=a&q=b']) {
      const { status, body } = await get(`/tools/openai?${q}`);
      expect(status, q).toBe(400);
      expect(body.error.code).toBe('invalid_request');
    }
  });
});

describe('GET /tools/anthropic and /tools', () => {
  it('anthropic entries are {name, description, input_schema}', async () => {
    const { body } = await get('/tools/anthropic?q=weather');
    expect(body[0]).toEqual({
      name: 'get_weather',
      description: 'Get the current weather for a city',
      input_schema: expect.objectContaining({ type: 'object', required: ['city'] }),
    });
  });

  it('the native list has every registry field', async () => {
    const { body } = await get('/tools');
    expect(body.find((t: { name: string }) => t.name === 'calculator')).toEqual({
      name: 'calculator',
      description: expect.any(String),
      category: 'math',
      parameters: expect.objectContaining({ type: 'object' }),
      risk: 'safe',
      requiresApproval: false,
      sandboxed: false,
      timeoutMs: 1000,
      cacheTtlSeconds: 0,
    });
  });
});

describe('every listing holds only the tools the client may call', () => {
  it.each(['/tools', '/tools/openai', '/tools/anthropic'])('%s', async (path) => {
    const { body } = await get(path, KEYS.bob);
    const names = body
      .map((t: { name?: string; function?: { name: string } }) => t.name ?? t.function?.name)
      .sort();
    expect(names).toEqual(['calculator', 'current_time']);
    const all = await get(path, KEYS.alice);
    expect(all.body.length).toBeGreaterThan(2);
  });
});
