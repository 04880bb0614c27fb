import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { closeObjects, plainSchema } from './schema.js';
import { strictSchemaIssue } from './strict.js';
import { fromStrictArguments, toStrictSchema } from './strict-form.js';

/** As the registry stores a schema: plain JSON, objects closed. */
const stored = (schema: unknown) => closeObjects(plainSchema(schema));

const strictOf = (schema: unknown) => {
  const form = toStrictSchema(stored(schema));
  if (!form.ok) throw new Error(form.issue);
  return form.schema;
};

describe('toStrictSchema', () => {
  it('tells the constraints strict mode lacks in the description, and keeps the rest', () => {
    expect(
      strictOf(
        Type.Object({
          q: Type.String({ minLength: 1, maxLength: 500, description: 'What to find' }),
          id: Type.String({ minLength: 1 }),
          n: Type.Integer({ minimum: 1, maximum: 25, description: 'How many (default 5)' }),
          wait: Type.Number({ exclusiveMinimum: 0, default: 2 }),
          tags: Type.Array(Type.String({ pattern: '^[a-z]+$' }), {
            maxItems: 3,
            uniqueItems: true,
          }),
          when: Type.String({ format: 'date-time', examples: ['2026-01-01T00:00:00Z'] }),
          mode: Type.Union([Type.Literal('a'), Type.Literal('b')], { title: 'Mode' }),
        }),
      ),
    ).toEqual({
      type: 'object',
      properties: {
        q: { type: 'string', description: 'What to find. 1 to 500 characters.' },
        id: { type: 'string', description: 'Not empty.' },
        n: { type: 'integer', description: 'How many (default 5). From 1 to 25.' },
        wait: { type: 'number', description: 'Greater than 0, default 2.' },
        tags: {
          type: 'array',
          description: 'At most 3 items, no duplicates.',
          items: { type: 'string', description: 'Matching the regular expression ^[a-z]+$.' },
        },
        when: {
          type: 'string',
          description: 'Format date-time, e.g. "2026-01-01T00:00:00Z".',
        },
        mode: {
          title: 'Mode',
          anyOf: [
            { const: 'a', type: 'string' },
            { const: 'b', type: 'string' },
          ],
        },
      },
      required: ['q', 'id', 'n', 'wait', 'tags', 'when', 'mode'],
      additionalProperties: false,
    });
  });

  it('makes optional properties nullable and required, at every level', () => {
    const schema = strictOf(
      Type.Object({
        a: Type.Optional(Type.String()),
        e: Type.Optional(Type.Union([Type.Literal('x'), Type.Literal('y')])),
        k: Type.Optional(Type.Boolean({ description: 'Keep it' })),
        o: Type.Object({ deep: Type.Optional(Type.Integer()) }),
        l: Type.Array(Type.Object({ c: Type.Optional(Type.Number()) })),
        already: Type.Optional(Type.Union([Type.String(), Type.Null()])),
        empty: Type.Optional(Type.Object({})),
      }),
    );
    expect(schema).toEqual({
      type: 'object',
      properties: {
        a: { type: ['string', 'null'], description: 'Null to leave it out.' },
        e: {
          anyOf: [{ const: 'x', type: 'string' }, { const: 'y', type: 'string' }, { type: 'null' }],
          description: 'Null to leave it out.',
        },
        k: { type: ['boolean', 'null'], description: 'Keep it. Null to leave it out.' },
        o: {
          type: 'object',
          properties: {
            deep: { type: ['integer', 'null'], description: 'Null to leave it out.' },
          },
          required: ['deep'],
          additionalProperties: false,
        },
        l: {
          type: 'array',
          items: {
            type: 'object',
            properties: {
              c: { type: ['number', 'null'], description: 'Null to leave it out.' },
            },
            required: ['c'],
            additionalProperties: false,
          },
        },
        // Takes null as written: null is a value there, not "absent".
        already: { anyOf: [{ type: 'string' }, { type: 'null' }] },
        empty: {
          type: ['object', 'null'],
          description: 'Null to leave it out.',
          properties: {},
          required: [],
          additionalProperties: false,
        },
      },
      required: ['a', 'e', 'k', 'o', 'l', 'already', 'empty'],
      additionalProperties: false,
    });
    expect(strictSchemaIssue(schema)).toBeUndefined();
  });

  it('lists a map as {key, value} entries', () => {
    const schema = strictOf(
      Type.Object({
        headers: Type.Optional(
          Type.Record(Type.String({ pattern: '^[a-z]+$' }), Type.String({ maxLength: 9 }), {
            maxProperties: 4,
            description: 'Extra headers',
          }),
        ),
        counts: Type.Record(Type.String(), Type.Integer()),
      }),
    );
    expect(schema.properties).toEqual({
      headers: {
        type: ['array', 'null'],
        description:
          'Extra headers. At most 4 entries. Given as a list of {"key", "value"} entries. Null to leave it out.',
        items: {
          type: 'object',
          properties: {
            key: { type: 'string', description: 'Matching the regular expression ^[a-z]+$.' },
            value: { type: 'string', description: 'At most 9 characters.' },
          },
          required: ['key', 'value'],
          additionalProperties: false,
        },
      },
      counts: expect.objectContaining({
        type: 'array',
        items: expect.objectContaining({
          properties: { key: { type: 'string' }, value: { type: 'integer' } },
        }),
      }),
    });
    expect(strictSchemaIssue(schema)).toBeUndefined();
  });

  it.each([
    [
      'allOf',
      Type.Object({
        a: Type.Intersect([Type.Object({ x: Type.String() }), Type.Object({ y: Type.String() })]),
      }),
    ],
    ['not', Type.Object({ a: Type.Not(Type.String()) })],
    ['a tuple', Type.Object({ t: Type.Tuple([Type.String(), Type.Number()]) })],
    [
      'an optional property inside a union',
      Type.Object({
        u: Type.Union([Type.Object({ a: Type.Optional(Type.String()) }), Type.String()]),
      }),
    ],
    [
      'a map inside a union',
      Type.Object({ u: Type.Union([Type.Record(Type.String(), Type.String()), Type.String()]) }),
    ],
  ])('has no strict form for %s', (_, schema) => {
    expect(toStrictSchema(stored(schema))).toMatchObject({ ok: false, issue: expect.any(String) });
  });

  it('a value of no type (Type.Unknown) is rewritten, and the check refuses it', () => {
    const schema = strictOf(Type.Object({ v: Type.Unknown() }));
    expect(strictSchemaIssue(schema)).toContain('must say its type');
  });
});

describe('fromStrictArguments', () => {
  const full = stored(
    Type.Object({
      city: Type.String(),
      units: Type.Optional(Type.String()),
      nullable: Type.Optional(Type.Union([Type.String(), Type.Null()])),
      o: Type.Optional(Type.Object({ deep: Type.Optional(Type.Integer()), need: Type.String() })),
      l: Type.Optional(Type.Array(Type.Object({ c: Type.Optional(Type.Number()) }))),
      headers: Type.Optional(Type.Record(Type.String(), Type.String())),
      nested: Type.Optional(
        Type.Record(Type.String(), Type.Object({ x: Type.Optional(Type.String()) })),
      ),
    }),
  );

  it('drops null for an optional property that does not take null, at every level', () => {
    expect(
      fromStrictArguments(full, {
        city: 'Oslo',
        units: null,
        nullable: null,
        o: { deep: null, need: 'y' },
        l: [{ c: null }, { c: 2 }],
        headers: null,
      }),
    ).toEqual({ city: 'Oslo', nullable: null, o: { need: 'y' }, l: [{}, { c: 2 }] });
  });

  it('turns {key, value} entries back into the map, values included', () => {
    expect(
      fromStrictArguments(full, {
        city: 'Oslo',
        headers: [
          { key: 'Accept', value: 'text/plain' },
          { key: '__proto__', value: 'x' },
        ],
        nested: [{ key: 'a', value: { x: null } }],
      }),
    ).toEqual({
      city: 'Oslo',
      headers: JSON.parse('{"Accept":"text/plain","__proto__":"x"}'),
      nested: { a: {} },
    });
  });

  it('leaves what it cannot read as the map, and arguments with nothing to change, as they are', () => {
    const twice = [
      { key: 'a', value: '1' },
      { key: 'a', value: '2' },
    ];
    expect(fromStrictArguments(full, { city: 'x', headers: twice }).headers).toBe(twice);
    const extra = [{ key: 'a', value: '1', more: true }];
    expect(fromStrictArguments(full, { city: 'x', headers: extra }).headers).toBe(extra);
    const args = { city: 'x', headers: { a: '1' }, l: [{ c: 1 }] };
    expect(fromStrictArguments(full, args)).toBe(args);
    // An open object with named properties is no map: its optional nulls are dropped as ever.
    const open = stored(
      Type.Object({ a: Type.Optional(Type.String()) }, { additionalProperties: true }),
    );
    expect(fromStrictArguments(open, { a: null, extra: null })).toEqual({ extra: null });
    // A required property's null is the caller's mistake, left for validation to say so.
    expect(fromStrictArguments(full, { city: null })).toEqual({ city: null });
  });
});
