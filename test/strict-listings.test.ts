/**
 * OpenAI strict mode for toolgate's own tools: every built-in is listed strict, each strict
 * listing keeps every rule of OpenAI's Structured Outputs (one table row per rule, each row
 * shown to catch a schema that breaks it), and what a strict-mode model sends back — `null`
 * for "absent", a map as `{key, value}` entries — runs, while a bound the strict form only
 * tells in words is still enforced as a readable `invalid_arguments`.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createToolRegistry } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './support/stack.js';

type Json = Record<string, unknown>;

/** The built-in tools, from the package that defines them (not from what the gateway says). */
const BUILT_INS = createToolRegistry()
  .list()
  .map((t) => t.name);

let stack: Stack;
let echo: Server;
let echoUrl: string;
beforeAll(async () => {
  // Answers the request headers it got, as JSON: what http_get sent.
  echo = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(req.headers));
  });
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  echoUrl = `http://127.0.0.1:${(echo.address() as AddressInfo).port}/`;
  stack = await startStack({ config: { policy: { http: { allowPrivateNetworks: true } } } });
});
afterAll(async () => {
  await stack?.close();
  await new Promise((r) => echo?.close(r));
});

const get = async (path: string) => (await stack.call(path)).json() as Promise<Json[]>;

/** Every strict listing entry, as `[where, tool name, parameters]`. */
async function strictListings(): Promise<[string, string, Json][]> {
  const chat = (await get('/tools/openai?strict=true')) as {
    function: { name: string; parameters: Json; strict?: boolean };
  }[];
  const responses = (await get('/tools/openai-responses')) as {
    name: string;
    parameters: Json;
    strict: boolean;
  }[];
  return [
    ...chat
      .filter((t) => t.function.strict)
      .map((t): [string, string, Json] => ['openai', t.function.name, t.function.parameters]),
    ...responses
      .filter((t) => t.strict)
      .map((t): [string, string, Json] => ['openai-responses', t.name, t.parameters]),
  ];
}

// ---- OpenAI Structured Outputs, as its guide states them, checked independently of toolgate.

const isObject = (v: unknown): v is Json =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every sub-schema with its nesting depth below the root (through properties and items). */
function* walk(s: Json, depth = 0, at = ''): Generator<{ s: Json; depth: number; at: string }> {
  yield { s, depth, at: at || '/' };
  if (isObject(s.properties))
    for (const [k, p] of Object.entries(s.properties))
      if (isObject(p)) yield* walk(p, depth + 1, `${at}/properties/${k}`);
  if (isObject(s.items)) yield* walk(s.items, depth + 1, `${at}/items`);
  if (Array.isArray(s.anyOf))
    for (const [i, b] of s.anyOf.entries())
      if (isObject(b)) yield* walk(b, depth, `${at}/anyOf/${i}`);
  for (const key of ['$defs', 'definitions'])
    if (isObject(s[key]))
      for (const [k, d] of Object.entries(s[key]))
        if (isObject(d)) yield* walk(d, depth, `${at}/${key}/${k}`);
}

const TYPES = new Set(['string', 'number', 'integer', 'boolean', 'object', 'array', 'null']);
const KEYWORDS = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'enum',
  'const',
  'anyOf',
  'description',
  'title',
  '$ref',
  '$defs',
  'definitions',
]);
const typesOf = (s: Json) => (s.type === undefined ? [] : [s.type].flat());
const isObjectSchema = (s: Json) => typesOf(s).includes('object') || s.properties !== undefined;
const text = (v: unknown) => (typeof v === 'string' ? v : v === null ? '' : String(v));

/** One rule: the places a schema breaks it (empty: kept), and a schema that breaks it. */
interface Rule {
  rule: string;
  broken: (schema: Json) => string[];
  counterexample: Json;
}
const obj = (properties: Json, extra: Json = {}): Json => ({
  type: 'object',
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
  ...extra,
});

const RULES: Rule[] = [
  {
    rule: 'supported types only, and every schema states one (type, enum, const, anyOf or $ref)',
    broken: (schema) =>
      [...walk(schema)]
        .filter(
          ({ s }) =>
            typesOf(s).some((t) => typeof t !== 'string' || !TYPES.has(t)) ||
            !['type', 'enum', 'const', 'anyOf', '$ref'].some((k) => k in s),
        )
        .map(({ at }) => at),
    counterexample: obj({ a: { description: 'anything' } }),
  },
  {
    rule: 'supported keywords only',
    broken: (schema) =>
      [...walk(schema)].flatMap(({ s, at }) =>
        Object.keys(s)
          .filter((k) => !KEYWORDS.has(k))
          .map((k) => `${at}: ${k}`),
      ),
    counterexample: obj({ a: { type: 'string', maxLength: 10 } }),
  },
  {
    rule: 'additionalProperties: false on every object',
    broken: (schema) =>
      [...walk(schema)]
        .filter(({ s }) => isObjectSchema(s) && s.additionalProperties !== false)
        .map(({ at }) => at),
    counterexample: obj({ a: { type: 'object', properties: {}, required: [] } }),
  },
  {
    rule: 'every property listed in required',
    broken: (schema) =>
      [...walk(schema)].flatMap(({ s, at }) =>
        isObject(s.properties)
          ? Object.keys(s.properties)
              .filter((k) => !(Array.isArray(s.required) && s.required.includes(k)))
              .map((k) => `${at}: ${k}`)
          : [],
      ),
    counterexample: obj({ a: { type: 'string' } }, { required: [] }),
  },
  {
    rule: 'at most 10 levels of nesting',
    broken: (schema) => {
      const deepest = Math.max(...[...walk(schema)].map(({ depth }) => depth));
      return deepest > 10 ? [`${deepest} levels`] : [];
    },
    counterexample: Array.from({ length: 11 }).reduce<Json>((inner) => obj({ d: inner }), {
      type: 'string',
    }),
  },
  {
    rule: 'at most 5000 object properties in all',
    broken: (schema) => {
      const n = [...walk(schema)].reduce(
        (sum, { s }) => sum + (isObject(s.properties) ? Object.keys(s.properties).length : 0),
        0,
      );
      return n > 5000 ? [`${n} properties`] : [];
    },
    counterexample: obj(
      Object.fromEntries(Array.from({ length: 5001 }, (_, i) => [`p${i}`, { type: 'string' }])),
    ),
  },
  {
    rule: 'at most 1000 enum values in all; a string enum of more than 250 values at most 15000 characters',
    broken: (schema) => {
      const enums = [...walk(schema)].flatMap(({ s, at }) =>
        Array.isArray(s.enum) ? [{ values: s.enum as unknown[], at }] : [],
      );
      const total = enums.reduce((n, e) => n + e.values.length, 0);
      return [
        ...(total > 1000 ? [`${total} enum values`] : []),
        ...enums
          .filter(
            (e) =>
              e.values.filter((v) => typeof v === 'string').length > 250 &&
              e.values.reduce<number>((n, v) => n + text(v).length, 0) > 15000,
          )
          .map((e) => `${e.at}: a large enum over 15000 characters`),
      ];
    },
    counterexample: obj({
      e: { type: 'string', enum: Array.from({ length: 300 }, (_, i) => `${i}`.padEnd(60, 'v')) },
    }),
  },
  {
    rule: 'at most 120000 characters of property names, definition names, enum and const values',
    broken: (schema) => {
      let n = 0;
      for (const { s } of walk(schema)) {
        if (isObject(s.properties)) for (const k of Object.keys(s.properties)) n += k.length;
        for (const key of ['$defs', 'definitions'])
          if (isObject(s[key])) for (const k of Object.keys(s[key])) n += k.length;
        if (Array.isArray(s.enum)) for (const v of s.enum) n += text(v).length;
        if (s.const !== undefined) n += text(s.const).length;
      }
      return n > 120_000 ? [`${n} characters`] : [];
    },
    counterexample: obj(
      Object.fromEntries(
        Array.from({ length: 1001 }, (_, i) => [`${i}`.padEnd(120, 'n'), { type: 'string' }]),
      ),
    ),
  },
  {
    rule: 'the root is an object schema, not an anyOf',
    broken: (schema) => [
      ...(schema.type !== 'object' ? ['root type'] : []),
      ...('anyOf' in schema ? ['root anyOf'] : []),
    ],
    counterexample: { type: 'object', anyOf: [obj({}), obj({ a: { type: 'string' } })] },
  },
];

describe('OpenAI strict mode for the built-in tools', () => {
  it('lists every built-in tool strict, in both OpenAI listings', async () => {
    expect(BUILT_INS.length).toBeGreaterThanOrEqual(14);
    const native = (await get('/tools')) as { name: string; strict: boolean }[];
    expect(native.filter((t) => !t.strict).map((t) => t.name)).toEqual([]);
    const listed = await strictListings();
    for (const where of ['openai', 'openai-responses'])
      expect(
        listed
          .filter(([w]) => w === where)
          .map(([, name]) => name)
          .sort(),
        where,
      ).toEqual([...BUILT_INS].sort());
  });

  it.each(RULES)(
    'every strict listing keeps the rule: $rule',
    async ({ broken, counterexample }) => {
      // The row is no formality: it catches a schema that breaks its rule.
      expect(broken(counterexample)).not.toEqual([]);
      for (const [where, name, parameters] of await strictListings())
        expect(broken(parameters), `${where} ${name}`).toEqual([]);
    },
  );

  it('function names are what OpenAI takes (^[a-zA-Z0-9_-]{1,64}$)', () => {
    for (const name of BUILT_INS) expect(name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
  });
});

describe('what a strict-mode model sends back', () => {
  async function bridge(calls: { name: string; arguments: Json }[]) {
    const res = await stack.call('/v1/tool-calls', {
      json: {
        role: 'assistant',
        content: null,
        tool_calls: calls.map((c, i) => ({
          id: `call_strict_${i}_${Date.now()}`,
          type: 'function',
          function: { name: c.name, arguments: JSON.stringify(c.arguments) },
        })),
      },
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { messages: { content: string }[] };
    return body.messages.map((m) => m.content);
  }

  it('runs: null for every optional property, a map as {key, value} entries', async () => {
    const [time, search, http] = await bridge([
      { name: 'current_time', arguments: { timezone: null } },
      { name: 'memory_search', arguments: { query: 'nothing saved yet', limit: null } },
      {
        name: 'http_get',
        arguments: { url: echoUrl, headers: [{ key: 'X-Strict-Probe', value: 'pairs' }] },
      },
    ]);
    expect(JSON.parse(time!)).toMatchObject({ timezone: 'UTC' });
    expect(JSON.parse(search!)).toEqual({ results: [] });
    const got = JSON.parse(http!) as { status: number; body: string };
    expect(got.status).toBe(200);
    expect(JSON.parse(got.body)).toMatchObject({ 'x-strict-probe': 'pairs' });
  });

  it('a bound told only in the description is still enforced, readably', async () => {
    const [tooLong, tooMany] = await bridge([
      { name: 'calculator', arguments: { expression: `${'1+'.repeat(600)}1` } },
      { name: 'find_tools', arguments: { query: 'files', limit: 26 } },
    ]);
    expect(JSON.parse(tooLong!)).toMatchObject({
      error: {
        code: 'invalid_arguments',
        message: expect.stringContaining('/expression must NOT have more than 1000 characters'),
      },
    });
    expect(JSON.parse(tooMany!)).toMatchObject({
      error: {
        code: 'invalid_arguments',
        message: expect.stringContaining('/limit must be <= 25'),
      },
    });
  });
});
