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

describe('JSON Schema 2020-12', () => {
  const spec = (parameters: Record<string, unknown>) => ({
    name: 'with_defs',
    description: 'x',
    category: 'test',
    parameters: parameters as never,
    handler: () => null,
  });
  const schema = {
    type: 'object',
    $defs: { address: { type: 'object', properties: { city: { type: 'string' } } } },
    properties: { address: { $ref: '#/$defs/address' } },
    additionalProperties: false,
  };

  it('a schema that declares 2020-12 is compiled in that dialect, $defs and $ref included', () => {
    const registry = new ToolRegistry();
    registry.register(spec({ $schema: 'https://json-schema.org/draft/2020-12/schema', ...schema }));
    expect(registry.validate('with_defs', { address: { city: 'Oslo' } })).toMatchObject({
      ok: true,
    });
    expect(registry.validate('with_defs', { address: { city: 7 } })).toMatchObject({ ok: false });
    // Listed as written.
    expect(registry.get('with_defs')!.parameters).toMatchObject({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $defs: { address: { type: 'object' } },
    });
  });

  it('2020-12 keywords work (prefixItems); a $schema no compiler knows is refused at registration', () => {
    const registry = new ToolRegistry();
    registry.register(
      spec({
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        type: 'object',
        properties: {
          point: {
            type: 'array',
            prefixItems: [{ type: 'number' }, { type: 'string' }],
            minItems: 2,
            items: false,
          },
        },
      }),
    );
    expect(registry.validate('with_defs', { point: [1, 'a'] })).toMatchObject({ ok: true });
    expect(registry.validate('with_defs', { point: ['a', 1] })).toMatchObject({ ok: false });
    expect(() =>
      new ToolRegistry().register(spec({ $schema: 'https://example.com/my-dialect', ...schema })),
    ).toThrow(/invalid schema/);
  });
});

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
  it('makes every tool its strict form once: optional fields nullable, bounds in the description', () => {
    const r = registry();
    expect(r.get('add_numbers')?.strict).toBe(true);
    const weather = r.get('get_weather')!;
    expect(weather.strict).toBe(true);
    expect(weather.strictParameters).toMatchObject({
      required: ['city', 'units', 'days'],
      properties: {
        units: { anyOf: [{ const: 'c' }, { const: 'f' }, { type: 'null' }] },
        days: { type: ['integer', 'null'], description: 'At least 1. Null to leave it out.' },
      },
    });
    // The full schema is what calls are validated against.
    expect(weather.parameters).toMatchObject({ required: ['city'] });
    expect(r.validate('get_weather', { city: 'Oslo', units: null, days: 0 })).toMatchObject({
      ok: false,
      issues: [{ path: '/days', keyword: 'minimum' }],
    });
    r.register({
      name: 'no_strict_form',
      description: 'd',
      category: 'web',
      parameters: Type.Object({
        both: Type.Intersect([
          Type.Object({ a: Type.String() }),
          Type.Object({ b: Type.String() }),
        ]),
      }),
      handler: () => 'x',
    });
    expect(r.get('no_strict_form')).toMatchObject({
      strict: false,
      strictParameters: undefined,
      strictIssue: expect.stringContaining('allOf'),
    });
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

describe('result schemas', () => {
  const Listing = Type.Object(
    {
      path: Type.String(),
      entries: Type.Array(Type.Object({ name: Type.String(), size: Type.Integer() })),
    },
    { additionalProperties: false },
  );
  const listing = defineTool({
    name: 'list_things',
    description: 'Lists things',
    category: 'test',
    parameters: Type.Object({}),
    result: Listing,
    handler: () => ({ path: '.', entries: [] }),
  });
  const spec = (name: string, result: unknown) =>
    ({
      name,
      description: 'd',
      category: 'test',
      parameters: Type.Object({}),
      result,
      handler: () => ({}),
    }) as never;

  it('keeps the declared schema as plain JSON, not closed the way parameters are', () => {
    const r = new ToolRegistry();
    const open = r.register(spec('open_result', Type.Object({ a: Type.String() })));
    expect(open.result).toEqual({
      type: 'object',
      properties: { a: { type: 'string' } },
      required: ['a'],
    });
    expect(Object.getOwnPropertySymbols(open.result)).toEqual([]);
    expect(r.checkResult('open_result', { a: 'x', more: 1 })).toEqual({ ok: true });
    expect(r.register(add).result).toBeUndefined();
  });

  it('takes a result schema of any shape (MCP wraps the non-object ones), refuses what is no schema', () => {
    const r = new ToolRegistry();
    for (const [name, result] of [
      ['number_result', Type.Number()],
      ['array_result', Type.Array(Type.String())],
      ['union_result', Type.Union([Type.Object({ a: Type.String() }), Type.Object({})])],
    ] as const) {
      expect(r.register(spec(name, result)).result).toEqual(JSON.parse(JSON.stringify(result)));
    }
    expect(r.checkResult('number_result', 14)).toEqual({ ok: true });
    expect(r.checkResult('number_result', '14')).toMatchObject({ ok: false });
    for (const result of [null, 42, [Type.String()]]) {
      expect(() => r.register(spec('not_a_schema', result))).toThrow(
        new RegistryError('tool "not_a_schema": result must be a JSON Schema object'),
      );
    }
    expect(() => r.register(spec('typo', { type: 'nubmer' }))).toThrow('invalid result schema');
    expect(r.size).toBe(3);
  });

  it('compiles the result schema at registration: a broken one is refused there', () => {
    const r = new ToolRegistry();
    expect(() =>
      r.register(spec('typo_type', { type: 'object', properties: { a: { type: 'strng' } } })),
    ).toThrow(/^tool "typo_type": invalid result schema: /);
    // strict mode: an unknown keyword is a mistake, not a comment
    expect(() => r.register(spec('unknown_kw', { type: 'object', requird: ['a'] }))).toThrow(
      /invalid result schema: strict mode: unknown keyword: "requird"/,
    );
    expect(r.get('typo_type')).toBeUndefined();
  });

  it('checkResult passes a fitting result and reports the first mismatch of another', () => {
    const r = new ToolRegistry();
    r.register(listing);
    r.register(add);
    expect(r.checkResult('list_things', { path: '.', entries: [{ name: 'a', size: 1 }] })).toEqual({
      ok: true,
    });
    expect(r.checkResult('list_things', { path: '.', entries: [{ name: 'a' }] })).toEqual({
      ok: false,
      issues: [
        {
          path: '/entries/0',
          message: "must have required property 'size'",
          keyword: 'required',
          params: { missingProperty: 'size' },
        },
      ],
    });
    expect(r.checkResult('list_things', 42)).toMatchObject({
      ok: false,
      issues: [{ path: '/', keyword: 'type' }],
    });
    // no schema, nothing to check
    expect(r.checkResult('add_numbers', 'anything')).toEqual({ ok: true });
    expect(() => r.checkResult('nope', {})).toThrow(RegistryError);
  });

  it('stops at the first mismatch however wrong a large result is', () => {
    const r = new ToolRegistry();
    r.register(listing);
    const entries = Array.from({ length: 100_000 }, (_, i) => ({ name: i, size: 'big' }));
    const check = r.checkResult('list_things', { path: '.', entries, extra: true });
    expect(check.ok).toBe(false);
    if (!check.ok) expect(check.issues).toHaveLength(1);
  });
});
