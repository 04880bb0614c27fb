import { Type } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { closeObjects, plainSchema } from './schema.js';
import { STRICT_LIMITS, strictSchemaIssue } from './strict.js';

/** As the registry stores a schema: plain JSON, objects closed. */
const stored = (schema: unknown) => closeObjects(plainSchema(schema));

describe('strictSchemaIssue', () => {
  it('accepts all-required objects with nullable "optional" fields, nested, in arrays and anyOf', () => {
    const schema = stored(
      Type.Object({
        city: Type.String({ description: 'City name' }),
        units: Type.Union([Type.Literal('c'), Type.Literal('f'), Type.Null()]),
        days: Type.Union([Type.Integer(), Type.Null()]),
        tags: Type.Array(Type.Object({ key: Type.String(), value: Type.String() })),
        mode: Type.Union([Type.Literal('fast'), Type.Literal('slow')]),
        note: { type: ['string', 'null'] },
        empty: Type.Object({}),
      }),
    );
    expect(strictSchemaIssue(schema)).toBeUndefined();
  });

  it.each([
    ['an optional property', Type.Object({ a: Type.Optional(Type.String()) }), '/properties/a'],
    [
      'an optional property of a nested object',
      Type.Object({ o: Type.Object({ b: Type.Optional(Type.Number()) }) }),
      '/properties/o/properties/b',
    ],
    [
      'an optional property of an object in an array',
      Type.Object({ l: Type.Array(Type.Object({ c: Type.Optional(Type.Boolean()) })) }),
      '/properties/l/items/properties/c',
    ],
    ['minLength', Type.Object({ a: Type.String({ minLength: 1 }) }), 'minLength'],
    ['maxLength', Type.Object({ a: Type.String({ maxLength: 9 }) }), 'maxLength'],
    ['pattern', Type.Object({ a: Type.String({ pattern: '^x' }) }), 'pattern'],
    ['format', Type.Object({ a: Type.String({ format: 'email' }) }), 'format'],
    ['minimum', Type.Object({ a: Type.Integer({ minimum: 1 }) }), 'minimum'],
    ['maxItems', Type.Object({ a: Type.Array(Type.String(), { maxItems: 3 }) }), 'maxItems'],
    ['default', Type.Object({ a: Type.String({ default: 'x' }) }), 'default'],
    [
      'a record (patternProperties)',
      Type.Object({ r: Type.Record(Type.String(), Type.String()) }),
      'patternProperties',
    ],
    [
      'allOf',
      Type.Object({
        a: Type.Intersect([Type.Object({ x: Type.String() }), Type.Object({ y: Type.String() })]),
      }),
      'allOf',
    ],
  ])('rejects %s', (_, schema, reason) => {
    expect(strictSchemaIssue(stored(schema))).toContain(reason);
  });

  it('rejects open objects, a non-object root and a root anyOf', () => {
    expect(
      strictSchemaIssue({ type: 'object', properties: {}, additionalProperties: true }),
    ).toContain('additionalProperties');
    expect(strictSchemaIssue({ type: 'string' })).toContain('root');
    expect(
      strictSchemaIssue({
        type: 'object',
        anyOf: [{ type: 'object', properties: {}, additionalProperties: false }],
      }),
    ).toContain('root');
  });

  it('rejects schemas over the limits', () => {
    let deep: Record<string, unknown> = Type.String();
    for (let i = 0; i <= STRICT_LIMITS.depth; i++) deep = Type.Object({ d: deep });
    expect(strictSchemaIssue(stored(deep))).toContain('nested deeper');
    const wide = Object.fromEntries(
      Array.from({ length: STRICT_LIMITS.properties + 1 }, (_, i) => [`p${i}`, Type.String()]),
    );
    expect(strictSchemaIssue(stored(Type.Object(wide)))).toContain('properties in all');
    const manyEnums = Object.fromEntries(
      Array.from({ length: 11 }, (_, i) => [
        `e${i}`,
        { type: 'integer', enum: Array.from({ length: 100 }, (_, j) => j) },
      ]),
    );
    expect(strictSchemaIssue(stored(Type.Object(manyEnums)))).toContain('enum values in all');
    const bigEnum = {
      type: 'string',
      enum: Array.from({ length: 251 }, (_, i) => `${i}`.padEnd(60, 'x')),
    };
    expect(strictSchemaIssue(stored(Type.Object({ big: bigEnum })))).toContain(
      'more than 250 strings',
    );
    const longNames = Object.fromEntries(
      Array.from({ length: 1001 }, (_, i) => [`${i}`.padEnd(120, 'n'), Type.String()]),
    );
    expect(strictSchemaIssue(stored(Type.Object(longNames)))).toContain('characters of names');
  });

  it('rejects a schema that does not say its type', () => {
    expect(strictSchemaIssue(stored(Type.Object({ v: Type.Unknown() })))).toContain(
      'must say its type',
    );
  });
});
