/**
 * Refusals cost the refused (issue 10): every request with a valid key counts toward its
 * client's rate, whatever it is refused for; bad keys are limited per source address.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

const KEY = (name: string) => `${name}-key-0123456789abcdef`;
const LIMITED = ['unknown', 'forbidden', 'badjson', 'badargs', 'bridge', 'big'] as const;

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    config: {
      clients: [
        ...LIMITED.map((id) => ({
          id,
          key: KEY(id),
          tools: ['calculator'],
          rateLimit: { perMinute: 30 },
        })),
        { id: 'alice', key: KEYS.alice, tools: ['*'] },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
    },
  });
});
afterAll(async () => {
  await stack?.close();
});

async function statuses(
  n: number,
  request: () => Promise<Response>,
): Promise<{ codes: string[]; retryAfter: (string | null)[] }> {
  const codes: string[] = [];
  const retryAfter: (string | null)[] = [];
  for (let i = 0; i < n; i++) {
    const res = await request();
    const body = (await res.json()) as { error?: { code: string }; status?: string };
    codes.push(`${res.status} ${body.error?.code ?? body.status}`);
    retryAfter.push(res.headers.get('retry-after'));
  }
  return { codes, retryAfter };
}

const repeat = (n: number, value: string) => Array.from({ length: n }, () => value);

describe('every request with a valid key counts toward its rate', () => {
  const cases: [string, string, () => Promise<Response>][] = [
    [
      'unknown',
      '404 unknown_tool',
      () => stack.call('/tools/no_such_tool/execute', { key: KEY('unknown'), json: {} }),
    ],
    [
      'forbidden',
      '403 forbidden',
      () => stack.call('/tools/current_time/execute', { key: KEY('forbidden'), json: {} }),
    ],
    [
      'badjson',
      '400 invalid_json',
      () =>
        stack.call('/tools/calculator/execute', { key: KEY('badjson'), json: '{"expression":' }),
    ],
    [
      'badargs',
      '400 invalid_arguments',
      () =>
        stack.call('/tools/calculator/execute', { key: KEY('badargs'), json: { expression: 1 } }),
    ],
  ];

  it.each(cases)(
    'a 30/min client sending 45 %s requests meets 429 after 30',
    async (id, refusal, request) => {
      const { codes, retryAfter } = await statuses(45, request);
      expect(codes).toEqual([...repeat(30, refusal), ...repeat(15, '429 rate_limited')]);
      expect(Number(retryAfter.at(-1))).toBeGreaterThan(0);
      // Over its rate, the client is refused everything, valid calls and listings included.
      const valid = await stack.call('/tools/calculator/execute', {
        key: KEY(id),
        json: { expression: '1+1' },
      });
      expect(valid.status).toBe(429);
      const listing = await stack.call('/tools', { key: KEY(id) });
      expect(listing.status).toBe(429);
      // Others are not.
      const other = await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } });
      expect(other.status).toBe(200);
      await Promise.all([valid, listing, other].map((r) => r.arrayBuffer()));
    },
  );

  it('the refusals are audited, and the rate refusals once per window, not per request', async () => {
    const audit = await stack.call('/v1/audit?client=unknown&event=refused&limit=1000', {
      key: KEYS.admin,
    });
    const entries = (await audit.json()) as { status: string }[];
    const counts = entries.reduce<Record<string, number>>(
      (acc, e) => ({ ...acc, [e.status]: (acc[e.status] ?? 0) + 1 }),
      {},
    );
    expect(counts).toEqual({ unknown_tool: 30, rate_limited: 1 });
  });

  it('a bridge request costs one per tool call, refused calls included', async () => {
    const calls = (n: number, name: string) => ({
      tool_calls: Array.from({ length: n }, (_, i) => ({
        id: `c${i}`,
        type: 'function',
        function: { name, arguments: '{"expression":"2*3"}' },
      })),
    });
    const bridge = (n: number, name = 'calculator') =>
      stack.call('/v1/tool-calls', { key: KEY('bridge'), json: calls(n, name) });
    // 10 + 10 (unknown tools) + 10 = 30 calls: the whole budget, in three requests.
    for (const name of ['calculator', 'no_such_tool', 'calculator']) {
      const res = await bridge(10, name);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    const over = await bridge(1);
    expect(over.status).toBe(429);
    expect((await over.json()).error.code).toBe('rate_limited');
  });

  it('a client over its rate is refused before its 1 MB body is read', async () => {
    const { codes } = await statuses(30, () =>
      stack.call('/tools/calculator/execute', { key: KEY('big'), json: { expression: '1' } }),
    );
    expect(new Set(codes)).toEqual(new Set(['200 ok']));
    const body = JSON.stringify({ expression: 'x'.repeat(1_000_000) });
    const started = performance.now();
    const res = await stack.call('/tools/calculator/execute', { key: KEY('big'), json: body });
    expect(res.status).toBe(429);
    expect((await res.json()).error.code).toBe('rate_limited');
    expect(performance.now() - started).toBeLessThan(2000);
  });
});

describe('requests with a missing or unknown key', () => {
  it('are limited per source address; a valid key from the same address still works', async () => {
    const { codes, retryAfter } = await statuses(70, () =>
      stack.call('/tools', { key: `unknown-${Math.random()}` }),
    );
    expect(codes).toEqual([...repeat(60, '401 unauthorized'), ...repeat(10, '429 rate_limited')]);
    expect(Number(retryAfter.at(-1))).toBeGreaterThan(0);
    // A missing key counts the same.
    const missing = await stack.call('/tools', { key: null });
    expect(missing.status).toBe(429);
    await missing.arrayBuffer();
    const valid = await stack.call('/tools/calculator/execute', { json: { expression: '2+2' } });
    expect(await valid.json()).toMatchObject({ status: 'ok', result: 4 });
  });
});

describe('body limits', () => {
  it('a body with more than 4096 object keys is invalid_json before it is parsed (walking it would cost too much)', async () => {
    const keys = (n: number) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 0]));
    const over = await stack.call('/tools/calculator/execute', {
      json: { expression: '1', x: keys(4_096) },
    });
    expect(over.status).toBe(400);
    expect((await over.json()).error).toMatchObject({
      code: 'invalid_json',
      message: expect.stringContaining('more than 4096 object keys'),
    });
    const under = await stack.call('/tools/calculator/execute', { json: keys(4_096) });
    expect((await under.json()).error.code).toBe('invalid_arguments');
  });
});
