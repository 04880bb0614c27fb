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

// Qualifies for strict mode: every property required, the optional one nullable.
const getForecast = defineTool({
  name: 'get_forecast',
  description: 'Get the weather forecast for a city',
  category: 'web',
  parameters: Type.Object({
    city: Type.String({ description: 'City name' }),
    days: Type.Union([Type.Integer(), Type.Null()], { description: 'Days ahead; null for 3' }),
  }),
  handler: ({ city, days }) => ({ city, days: days ?? 3 }),
});

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ tools: [getWeather, getForecast] });
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

  it('?strict=true lists every tool in its strict form; without it, the schema as declared', async () => {
    const { body } = await get('/tools/openai?strict=true&category=web');
    const byName = Object.fromEntries(
      body.map((t: { function: { name: string } }) => [t.function.name, t.function]),
    );
    // Already strict as written: listed as it is.
    expect(byName.get_forecast).toEqual({
      name: 'get_forecast',
      description: 'Get the weather forecast for a city',
      strict: true,
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', description: 'City name' },
          days: {
            anyOf: [{ type: 'integer' }, { type: 'null' }],
            description: 'Days ahead; null for 3',
          },
        },
        required: ['city', 'days'],
        additionalProperties: false,
      },
    });
    // An optional property: nullable and required in the strict form.
    expect(byName.get_weather).toEqual({
      name: 'get_weather',
      description: 'Get the current weather for a city',
      strict: true,
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', description: 'City name, e.g. "Paris"' },
          units: {
            anyOf: [
              { const: 'celsius', type: 'string' },
              { const: 'fahrenheit', type: 'string' },
              { type: 'null' },
            ],
            description: 'Null to leave it out.',
          },
        },
        required: ['city', 'units'],
        additionalProperties: false,
      },
    });
    // calculator's expression has minLength/maxLength: told in the description instead.
    const all = (await get('/tools/openai?strict=true')).body;
    expect(
      all.find((t: { function: { name: string } }) => t.function.name === 'calculator').function,
    ).toMatchObject({
      strict: true,
      parameters: {
        properties: {
          expression: {
            type: 'string',
            description: expect.stringContaining('1 to 1000 characters'),
          },
        },
      },
    });
    // Without ?strict: no entry says strict, and the schema is the one the gateway validates.
    const plain = await get('/tools/openai?category=web');
    expect(
      plain.body.find((t: { function: { name: string } }) => t.function.name === 'get_weather')
        .function.parameters.required,
    ).toEqual(['city']);
  });

  it('a strict-listed call past a bound the strict form only tells is a readable invalid_arguments', async () => {
    const res = await stack.call('/tools/calculator/execute', {
      json: { expression: '1+'.repeat(600) + '1' },
    });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({
      code: 'invalid_arguments',
      message:
        'arguments for calculator do not match its schema: /expression must NOT have more than 1000 characters',
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
      strict: true,
      timeoutMs: 1000,
      cacheTtlSeconds: 0,
    });
  });
});

type Listed = { name?: string; function?: { name: string } };
const nameOf = (t: Listed) => t.name ?? t.function?.name;

describe('GET /tools/openai-responses', () => {
  it('lists the flat Responses shape, strict forms by default', async () => {
    const { status, body } = await get('/tools/openai-responses');
    expect(status).toBe(200);
    for (const entry of body) {
      expect(Object.keys(entry).sort()).toEqual([
        'description',
        'name',
        'parameters',
        'strict',
        'type',
      ]);
      expect(entry.type).toBe('function');
    }
    const byName = Object.fromEntries(body.map((t: { name: string }) => [t.name, t]));
    expect(byName.get_forecast).toEqual({
      type: 'function',
      name: 'get_forecast',
      description: 'Get the weather forecast for a city',
      parameters: expect.objectContaining({ required: ['city', 'days'] }),
      strict: true,
    });
    expect(byName.get_weather).toMatchObject({
      name: 'get_weather',
      strict: true,
      parameters: { required: ['city', 'units'] },
    });
    expect(byName.calculator.strict).toBe(true);
  });

  it('?strict=false turns strict off everywhere; a bad value is 400', async () => {
    const { body } = await get('/tools/openai-responses?strict=false');
    expect(body.every((t: { strict: boolean }) => t.strict === false)).toBe(true);
    // …and the schemas as declared.
    expect(
      body.find((t: { name: string }) => t.name === 'get_weather').parameters.required,
    ).toEqual(['city']);
    const bad = await get('/tools/openai-responses?strict=1');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({
      code: 'invalid_request',
      message: expect.stringContaining('strict'),
    });
  });

  it('a strict-mode model may send null for the nullable field', async () => {
    const res = await stack.call('/tools/get_forecast/execute', {
      json: { city: 'Oslo', days: null },
    });
    expect(await res.json()).toMatchObject({ status: 'ok', result: { city: 'Oslo', days: 3 } });
  });
});

describe('GET /tools/anthropic options', () => {
  it('?cache_control=ephemeral puts the breakpoint on the last tool only, nothing else changes', async () => {
    const plain = (await get('/tools/anthropic')).body;
    const cached = (await get('/tools/anthropic?cache_control=ephemeral')).body;
    expect(cached.length).toBeGreaterThan(2);
    expect(cached.slice(0, -1)).toEqual(plain.slice(0, -1));
    expect(cached.at(-1)).toEqual({ ...plain.at(-1), cache_control: { type: 'ephemeral' } });
    const hour = (await get('/tools/anthropic?cache_control=ephemeral&ttl=1h')).body;
    expect(hour.at(-1).cache_control).toEqual({ type: 'ephemeral', ttl: '1h' });
    expect(hour.filter((t: object) => 'cache_control' in t)).toHaveLength(1);
  });

  it('?defer_loading= defers the named tools and categories', async () => {
    const { body } = await get('/tools/anthropic?defer_loading=category:web,calculator');
    const web = (await get('/tools?category=web')).body.map(nameOf);
    expect(web).toEqual(expect.arrayContaining(['get_forecast', 'get_weather']));
    const deferred = body.filter((t: { defer_loading?: boolean }) => t.defer_loading === true);
    expect(deferred.map(nameOf)).toEqual(['calculator', ...web].sort());
    expect(body.filter((t: object) => 'defer_loading' in t)).toHaveLength(deferred.length);
    expect(body.length).toBeGreaterThan(deferred.length);
  });

  it('?defer_loading=* with ?tool_search=regex: the search tool first and up front, carrying the breakpoint', async () => {
    const { body } = await get(
      '/tools/anthropic?defer_loading=*&tool_search=regex&cache_control=ephemeral',
    );
    expect(body[0]).toEqual({
      type: 'tool_search_tool_regex_20251119',
      name: 'tool_search_tool_regex',
      cache_control: { type: 'ephemeral' },
    });
    expect(body.length).toBeGreaterThan(2);
    for (const tool of body.slice(1)) {
      expect(tool.defer_loading).toBe(true);
      expect(tool).not.toHaveProperty('cache_control');
    }
    // with some tools up front, the breakpoint goes on the last of those
    const some = (
      await get(
        '/tools/anthropic?defer_loading=category:web&cache_control=ephemeral&tool_search=bm25',
      )
    ).body;
    const marked = some.filter((t: object) => 'cache_control' in t);
    expect(marked).toHaveLength(1);
    const upFront = some.filter((t: object) => !('defer_loading' in t));
    expect(marked[0]).toBe(upFront.at(-1));
    expect(some[0].name).toBe('tool_search_tool_bm25');
  });

  it.each([
    ['defer_loading=no_such_tool', 'no_such_tool'],
    ['defer_loading=category:nope', 'nope'],
    ['defer_loading=', 'defer_loading'],
    ['defer_loading=calculator&defer_loading=sleep', 'defer_loading'],
    ['defer_loading=bad%20name', 'bad name'],
    ['cache_control=persistent', 'cache_control'],
    ['cache_control=ephemeral&ttl=2h', 'ttl'],
    ['ttl=1h', 'cache_control=ephemeral'],
    ['tool_search=fuzzy', 'tool_search'],
    ['defer_loading=*&cache_control=ephemeral', 'not deferred'],
  ])('?%s is 400 invalid_request naming the problem', async (query, mentions) => {
    const { status, body } = await get(`/tools/anthropic?${query}`);
    expect(status).toBe(400);
    expect(body.error.code).toBe('invalid_request');
    expect(body.error.message).toContain(mentions);
  });

  it('a client cannot name tools outside its scope', async () => {
    const { status } = await get('/tools/anthropic?defer_loading=get_weather', KEYS.bob);
    expect(status).toBe(400);
    const own = await get('/tools/anthropic?defer_loading=calculator', KEYS.bob);
    expect(own.status).toBe(200);
  });
});

describe('listing order', () => {
  it.each(['/tools', '/tools/openai', '/tools/openai-responses', '/tools/anthropic'])(
    '%s is sorted by name',
    async (path) => {
      const names = (await get(path)).body.map(nameOf);
      expect(names.length).toBeGreaterThan(5);
      expect(names).toEqual([...names].sort());
    },
  );
});

describe('every listing holds only the tools the client may call', () => {
  it.each(['/tools', '/tools/openai', '/tools/openai-responses', '/tools/anthropic'])(
    '%s',
    async (path) => {
      const { body } = await get(path, KEYS.bob);
      const names = body
        .map((t: { name?: string; function?: { name: string } }) => t.name ?? t.function?.name)
        .sort();
      expect(names).toEqual(['calculator', 'current_time']);
      const all = await get(path, KEYS.alice);
      expect(all.body.length).toBeGreaterThan(2);
    },
  );
});
