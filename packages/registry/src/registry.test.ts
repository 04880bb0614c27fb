import { describe, expect, it } from 'vitest';
import { Type } from '@sinclair/typebox';
import { ToolRegistry, RegistryError } from './registry.js';
import { ToolScope } from './scope.js';
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

describe('registration', () => {
  it('decides strict-mode qualification once: optional non-nullable fields disqualify', () => {
    const r = registry();
    expect(r.get('add_numbers')?.strict).toBe(true);
    expect(r.get('get_weather')?.strict).toBe(false);
    r.register({
      name: 'get_weather_strict',
      description: 'Current weather for a city',
      category: 'web',
      parameters: Type.Object({
        city: Type.String(),
        units: Type.Union([Type.Literal('c'), Type.Literal('f'), Type.Null()]),
      }),
      handler: () => 'sunny',
    });
    expect(r.get('get_weather_strict')?.strict).toBe(true);
  });
});

describe('list order', () => {
  const specs = [weather, add, { ...add, name: 'Zeta' }, { ...add, name: 'add_more' }];

  it('is by name (code units), whatever the registration order', () => {
    const forward = new ToolRegistry();
    forward.registerAll(specs);
    const backward = new ToolRegistry();
    backward.registerAll([...specs].reverse());
    const names = ['Zeta', 'add_more', 'add_numbers', 'get_weather'];
    expect(forward.list().map((t) => t.name)).toEqual(names);
    expect(backward.list().map((t) => t.name)).toEqual(names);
  });

  it('ranks a query the same whatever the registration order (ties by name)', () => {
    const forward = new ToolRegistry();
    forward.registerAll(specs);
    const backward = new ToolRegistry();
    backward.registerAll([...specs].reverse());
    for (const q of ['add', 'numbers', 'math', 'weather']) {
      const ranked = forward.list({ q }).map((t) => t.name);
      expect(ranked.length, q).toBeGreaterThan(0);
      expect(
        backward.list({ q }).map((t) => t.name),
        q,
      ).toEqual(ranked);
    }
    // 'Zeta' and 'add_numbers' share a description: equal scores fall back to name order
    expect(forward.list({ q: 'together' }).map((t) => t.name)).toEqual([
      'Zeta',
      'add_more',
      'add_numbers',
    ]);
  });
});
