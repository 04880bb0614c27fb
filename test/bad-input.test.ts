import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    tools: testTools,
    config: {
      server: { port: 0, host: '127.0.0.1', bodyLimitBytes: 65536 },
      // The secret routes seal what they are sent: a key, so bad input reaches the store.
      secrets: { key: 'a'.repeat(64) },
    },
  });
});
afterAll(async () => {
  await stack?.close();
});

/** A small seeded PRNG so a failure can be replayed. */
function prng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * What goes into a path parameter: malformed percent-encoding, odd segments, and the names of
 * BullMQ's and JavaScript's own keys (`events`, `meta`, `__proto__`), which a call id or a tool
 * name must never reach Redis or an object lookup as.
 */
const ODD_SEGMENTS = [
  '%ff',
  '%',
  '%e0%a4%a',
  '%c0%af',
  '%uD800',
  '%00',
  '..%2F..%2Fetc',
  '%2e%2e',
  '~',
  encodeURIComponent('\u00e9\u{1f600}'),
  'a'.repeat(2000),
  'events',
  'meta',
  'id',
  'completed',
  'failed',
  'stalled-check',
  'wait',
  'marker',
  'de',
  '',
  '__proto__',
  'constructor',
  'hasOwnProperty',
  '00000000-0000-4000-8000-000000000000',
];

const ROUTES: [string, string][] = [
  ['GET', '/tools'],
  ['GET', '/tools/openai'],
  ['GET', '/tools/openai-responses'],
  ['GET', '/tools/anthropic'],
  ['POST', '/tools/calculator/execute'],
  ['POST', '/tools/current_time/execute'],
  ['POST', '/tools/sleep/execute'],
  ['POST', '/v1/tool-calls'],
  ['GET', '/v1/calls/abc'],
  ['POST', '/v1/calls/abc/cancel'],
  ['GET', '/v1/calls/abc/events'],
  ['GET', '/v1/calls'],
  ['GET', '/v1/me'],
  ['GET', '/v1/series'],
  ['GET', '/v1/approvals'],
  ['POST', '/v1/approvals/x/approve'],
  ['POST', '/v1/approvals/x/reject'],
  ['GET', '/v1/audit'],
  ['GET', '/v1/upstreams'],
  ['POST', '/v1/upstreams/x/tools/y/approve'],
  ['GET', '/v1/stats'],
  ['GET', '/v1/secrets/alice'],
  ['PUT', '/v1/secrets/alice/token'],
  ['DELETE', '/v1/secrets/alice/token'],
  ['DELETE', '/tools'],
  ['PUT', '/tools/calculator/execute'],
  // Every route with a parameter, with every odd segment in each parameter.
  ...ODD_SEGMENTS.flatMap((s): [string, string][] => [
    ['POST', `/tools/${s}/execute`],
    ['GET', `/v1/calls/${s}`],
    ['POST', `/v1/calls/${s}/cancel`],
    ['GET', `/v1/calls/${s}/events`],
    ['POST', `/v1/approvals/${s}/approve`],
    ['POST', `/v1/approvals/${s}/reject`],
    ['POST', `/v1/approvals/00000000-0000-4000-8000-000000000000/${s}`],
    ['POST', `/v1/upstreams/${s}/tools/${s}/approve`],
    ['PUT', `/v1/secrets/${s}/${s}`],
    ['PUT', `/v1/secrets/alice/${s}`],
    ['DELETE', `/v1/secrets/alice/${s}`],
  ]),
];

const QUERIES = [
  '',
  '?q=',
  '?q=%ff',
  '?limit=-1',
  '?limit=99999999999999999999',
  '?strict=maybe',
  '?wait=sometimes',
  '?category[]=x',
  '?q[a]=b',
  '?dialect=__proto__',
  '?limit=1e3',
  '?defer_loading=%ff,category:,*,,',
  '?defer_loading=constructor&cache_control=ephemeral',
  '?defer_loading=*&cache_control=ephemeral',
  '?cache_control[type]=ephemeral&ttl=1h',
  '?tool_search=__proto__',
];

function deep(n: number, open: string, close: string) {
  return open.repeat(n) + close.repeat(n);
}

function bodies(rand: () => number): (string | undefined)[] {
  const junk = Array.from({ length: 64 }, () =>
    String.fromCharCode(Math.floor(rand() * 0xffff)),
  ).join('');
  return [
    undefined,
    '',
    '{',
    '}',
    'null',
    'true',
    '[]',
    '"str"',
    '1e999999',
    junk,
    '{"expression": 1}',
    '{"expression": "1+1", "extra": {}}',
    '{"expression": ["1"]}',
    '{"expression": null}',
    '{"__proto__": {"admin": true}, "expression": "1"}',
    '{"constructor": {"prototype": {"x": 1}}}',
    '{"expression": "' + 'A'.repeat(70_000) + '"}',
    deep(5000, '[', ']'),
    deep(2000, '{"a":', '}').replace(/}$/, '1}'),
    '{"a":' + deep(100, '[', ']') + '}',
    JSON.stringify({ tool_calls: Array.from({ length: 20_000 }, () => 1) }),
    JSON.stringify({ tool_calls: [{ id: 1, function: { name: 5, arguments: 7 } }] }),
    JSON.stringify({
      tool_calls: [{ function: { name: 'calculator', arguments: '{"expression":' } }],
    }),
    JSON.stringify({ tool_calls: [{ function: { name: 'calculator', arguments: '[]' } }] }),
    JSON.stringify({ tool_calls: 'nope' }),
    JSON.stringify({ content: [{ type: 'tool_use', name: 'calculator', input: 'x' }] }),
    JSON.stringify({ content: [{ type: 'tool_use', id: {}, name: ['calculator'], input: null }] }),
    JSON.stringify({
      output: [{ type: 'function_call', call_id: null, name: 'x', arguments: '{}' }],
    }),
    JSON.stringify([{ type: 'function_call' }]),
    JSON.stringify({ ms: -1 }),
    JSON.stringify({ ms: 1.5 }),
    JSON.stringify({ timezone: '../../etc/passwd' }),
    JSON.stringify({ reason: 12 }),
    '\u0000\u0001\u0002',
    '{"a":"\\ud800"}',
  ];
}

const HEADER_SETS: Record<string, string>[] = [
  { 'content-type': 'application/json' },
  { 'content-type': 'text/plain' },
  { 'content-type': 'application/json; charset=utf-16' },
  { 'content-type': 'application/x-www-form-urlencoded' },
  { 'content-type': 'application/json', 'content-encoding': 'gzip' },
  { 'content-type': 'application/json', 'idempotency-key': '' },
  { 'content-type': 'application/json', 'idempotency-key': 'k'.repeat(300) },
  { 'content-type': 'application/json', prefer: 'respond-async' },
  { 'content-type': 'application/json', 'x-conversation-id': '\u00ff'.repeat(500) },
];

const AUTH = [KEYS.alice, KEYS.bob, KEYS.admin, null, 'x', 'Bearer', ''];

describe('bad input', () => {
  it('thousands of malformed requests at every route: never a 500, always the error shape, process alive', async () => {
    const rand = prng(20261130);
    const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)]!;
    const all = bodies(rand);
    const failures: string[] = [];
    let count = 0;
    const one = async () => {
      const [method, path] = pick(ROUTES);
      const query = pick(QUERIES);
      const body = method === 'GET' || method === 'DELETE' ? undefined : pick(all);
      const key = pick(AUTH);
      const headers: Record<string, string> = { ...pick(HEADER_SETS) };
      if (key !== null)
        headers.authorization =
          key.startsWith('Bearer') || key === '' || key === 'x' ? key : `Bearer ${key}`;
      const res = await fetch(stack.url + path + query, {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
      });
      const text = await res.text();
      count++;
      const label = `${method} ${path}${query} [${(body ?? '').slice(0, 40)}] → ${res.status} ${text.slice(0, 120)}`;
      if (res.status >= 500) return void failures.push(label);
      if (res.status >= 400) {
        try {
          const parsed = JSON.parse(text);
          if (typeof parsed?.error?.code !== 'string' || typeof parsed?.error?.message !== 'string')
            failures.push(`shape: ${label}`);
        } catch {
          failures.push(`not JSON: ${label}`);
        }
      }
    };
    const N = 3000;
    let next = 0;
    await Promise.all(
      Array.from({ length: 12 }, async () => {
        while (next++ < N) await one();
      }),
    );
    expect(count).toBe(N);
    expect(failures.slice(0, 10)).toEqual([]);
    expect((await stack.call('/healthz', { key: null })).status).toBe(200);
    const ok = await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } });
    expect(await ok.json()).toMatchObject({ status: 'ok', result: 2 });
  }, 120_000);

  it('malformed URLs and reserved names in path parameters are 400 or 404, never 500', async () => {
    const failures: string[] = [];
    for (const segment of ODD_SEGMENTS) {
      for (const [method, path] of [
        ['GET', `/v1/calls/${segment}`],
        ['POST', `/tools/${segment}/execute`],
        ['POST', `/v1/approvals/${segment}/approve`],
        ['POST', `/v1/approvals/${segment}/reject`],
      ] as const) {
        for (const key of [KEYS.alice, KEYS.admin]) {
          const res = await stack.call(path, {
            method,
            key,
            ...(method === 'GET' ? {} : { json: {} }),
          });
          const body = await res.json();
          // An empty id leaves `/v1/calls/`: the call list, a fine answer.
          if (path === '/v1/calls/' && res.status === 200) continue;
          if (![400, 403, 404].includes(res.status) || typeof body?.error?.code !== 'string')
            failures.push(`${method} ${path} → ${res.status} ${JSON.stringify(body)}`);
        }
      }
    }
    expect(failures).toEqual([]);

    const status = async (method: string, path: string) => {
      const res = await stack.call(path, {
        method,
        key: KEYS.admin,
        ...(method === 'GET' ? {} : { json: {} }),
      });
      return [res.status, (await res.json()).error.code];
    };
    expect(await status('GET', '/v1/calls/%ff')).toEqual([400, 'invalid_request']);
    expect(await status('POST', '/tools/%ff/execute')).toEqual([400, 'invalid_request']);
    expect(await status('POST', '/v1/approvals/%/reject')).toEqual([400, 'invalid_request']);
    for (const reserved of ['events', 'meta', 'id', 'completed', 'stalled-check']) {
      expect(await status('GET', `/v1/calls/${reserved}`)).toEqual([404, 'not_found']);
      expect(await status('POST', `/v1/approvals/${reserved}/approve`)).toEqual([404, 'not_found']);
    }
  });

  it('__proto__ and constructor keys are plain, rejected data: no prototype pollution', async () => {
    const res = await stack.call('/tools/calculator/execute', {
      json: '{"__proto__": {"polluted": "yes"}, "expression": "1"}',
    });
    expect(res.status).toBe(400);
    expect((await res.json()).error.details[0]).toMatchObject({
      keyword: 'additionalProperties',
      params: { additionalProperty: '__proto__' },
    });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('deep nesting and huge arrays are refused cleanly', async () => {
    for (const body of [
      deep(40, '[', ']'),
      JSON.stringify({ a: Array.from({ length: 10_001 }, () => 0) }),
    ]) {
      const res = await stack.call('/v1/tool-calls', { json: body });
      expect(res.status).toBe(400);
      expect((await res.json()).error).toMatchObject({
        code: 'invalid_json',
        message: expect.stringMatching(/nested deeper|longer than/),
      });
    }
  });
});
