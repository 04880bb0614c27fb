import { describe, expect, it } from 'vitest';
import { Type } from '@sinclair/typebox';
import { ToolRegistry, RegistryError } from './registry.js';
import { ToolScope } from './scope.js';
import { toAnthropic, toNative, toOpenAI } from './dialects.js';
import { defineTool } from './tool.js';
import { MAX_ISSUES } from './schema.js';

const weather = defineTool({
  name: 'get_weather',
  description: 'Current weather for a city',
  category: 'web',
  parameters: Type.Object({
    city: Type.String(),
    units: Type.Optional(Type.Union([Type.Literal('c'), Type.Literal('f')])),
    days: Type.Optional(Type.Integer({ minimum: 1 })),
  }),
  handler: ({ city }) => `sunny in ${city}`,
});
const add = defineTool({
  name: 'add_numbers',
  description: 'Add two numbers together',
  category: 'math',
  parameters: Type.Object({ a: Type.Number(), b: Type.Number() }),
  handler: ({ a, b }) => a + b,
});

function registry() {
  const r = new ToolRegistry();
  r.register(weather);
  r.register(add);
  return r;
}

describe('ToolRegistry.validate', () => {
  it('accepts valid arguments', () => {
    expect(registry().validate('get_weather', { city: 'Oslo', units: 'c' })).toEqual({
      ok: true,
      args: { city: 'Oslo', units: 'c' },
    });
  });

  it('rejects unknown properties even though the schema did not say so', () => {
    const result = registry().validate('get_weather', { city: 'Oslo', country: 'NO' });
    expect(result.ok).toBe(false);
    if (!result.ok)
      expect(result.issues[0]).toMatchObject({
        keyword: 'additionalProperties',
        params: { additionalProperty: 'country' },
      });
  });

  it('does not coerce types', () => {
    const result = registry().validate('add_numbers', { a: '1', b: 2 });
    expect(result.ok).toBe(false);
    if (!result.ok)
      expect(result.issues).toEqual([expect.objectContaining({ path: '/a', keyword: 'type' })]);
  });

  it('reports every error, not just the first', () => {
    const result = registry().validate('add_numbers', { a: 'x' });
    expect(result.ok).toBe(false);
    if (!result.ok)
      expect(result.issues.map((i) => i.keyword).sort()).toEqual(['required', 'type']);
  });

  it('reports at most MAX_ISSUES issues, however many keys are wrong', () => {
    const args = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`k${i}`, i]));
    const result = registry().validate('add_numbers', args);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.issues).toHaveLength(MAX_ISSUES);
      expect(result.issues[0]).toMatchObject({ keyword: expect.any(String) });
    }
  });

  it('drops null for optional fields (what OpenAI strict mode sends) but not for required ones', () => {
    const r = registry();
    expect(r.validate('get_weather', { city: 'Oslo', units: null, days: null })).toEqual({
      ok: true,
      args: { city: 'Oslo' },
    });
    expect(r.validate('get_weather', { city: null }).ok).toBe(false);
  });

  it('rejects a non-object', () => {
    expect(registry().validate('add_numbers', [1, 2]).ok).toBe(false);
  });
});

describe('ToolRegistry.register', () => {
  it('refuses duplicates, bad names and non-object schemas', () => {
    const r = registry();
    expect(() => r.register(add)).toThrow(RegistryError);
    expect(() => r.register({ ...add, name: 'has space' })).toThrow(/must match/);
    expect(() =>
      r.register({ ...add, name: 'scalar', parameters: Type.String() as never }),
    ).toThrow(/object schema/);
  });

  it('fills defaults: destructive tools need approval, timeouts default to 30 s', () => {
    const r = new ToolRegistry();
    const t = r.register({ ...add, name: 'wipe', risk: 'destructive' });
    expect(t).toMatchObject({
      requiresApproval: true,
      timeoutMs: 30_000,
      cacheTtlSeconds: 0,
      sandbox: undefined,
    });
  });
});

describe('ToolRegistry.list', () => {
  it('filters by scope and category', () => {
    const r = registry();
    expect(r.list({ scope: new ToolScope(['category:math']) }).map((t) => t.name)).toEqual([
      'add_numbers',
    ]);
    expect(r.list({ scope: new ToolScope(['get_weather']) }).map((t) => t.name)).toEqual([
      'get_weather',
    ]);
    expect(r.list({ scope: new ToolScope(['*']), category: 'web' }).map((t) => t.name)).toEqual([
      'get_weather',
    ]);
    expect(r.list({ scope: new ToolScope([]) })).toEqual([]);
  });

  it('ranks by a fuzzy query and honours limit', () => {
    const r = registry();
    expect(r.list({ q: 'wether' }).map((t) => t.name)).toEqual(['get_weather']);
    expect(r.list({ q: 'add' })[0]?.name).toBe('add_numbers');
    expect(r.list({ limit: 1 })).toHaveLength(1);
  });
});

describe('dialects', () => {
  it('renders the native, OpenAI and Anthropic shapes', () => {
    const tool = registry().get('add_numbers')!;
    const parameters = {
      type: 'object',
      properties: { a: { type: 'number' }, b: { type: 'number' } },
      required: ['a', 'b'],
      additionalProperties: false,
    };
    expect(toOpenAI(tool)).toEqual({
      type: 'function',
      function: { name: 'add_numbers', description: 'Add two numbers together', parameters },
    });
    expect(toAnthropic(tool)).toEqual({
      name: 'add_numbers',
      description: 'Add two numbers together',
      input_schema: parameters,
    });
    expect(toNative(tool)).toEqual({
      name: 'add_numbers',
      description: 'Add two numbers together',
      category: 'math',
      parameters,
      risk: 'safe',
      requiresApproval: false,
      sandboxed: false,
      timeoutMs: 30_000,
      cacheTtlSeconds: 0,
    });
  });

  it('makes OpenAI strict-mode schemas: all properties required, optional ones nullable', () => {
    const { function: fn } = toOpenAI(registry().get('get_weather')!, { strict: true });
    expect(fn.strict).toBe(true);
    expect(fn.parameters).toMatchObject({
      required: ['city', 'units', 'days'],
      additionalProperties: false,
      properties: {
        city: { type: 'string' },
        units: {
          anyOf: [
            {
              anyOf: [
                { const: 'c', type: 'string' },
                { const: 'f', type: 'string' },
              ],
            },
            { type: 'null' },
          ],
        },
        days: { type: ['integer', 'null'] },
      },
    });
  });
});
