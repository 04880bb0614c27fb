/**
 * Issue 11: one call's data never answers another call or another client — idempotency keys
 * and tool call ids are bound to the request, /v1/stats shows a client only its own calls.
 * Issue 31: the same with alice, bob and the admin's data on two Redis shards (two prefixes on
 * the run's Redis: a shard is a Redis and a prefix), the admin on bob's.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { counter, testTools } from './support/tools.js';

const tag = randomUUID().slice(0, 6);
const SHARDED = {
  redis: {
    shards: [
      { id: 's0', ...inject('redisTarget'), prefix: `td0${tag}`, home: true },
      { id: 's1', ...inject('redisTarget'), prefix: `td1${tag}` },
    ],
  },
  clients: [
    { id: 'alice', key: KEYS.alice, tools: ['*'], shard: 's0' },
    { id: 'bob', key: KEYS.bob, tools: ['current_time', 'category:math'], shard: 's1' },
    { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true, shard: 's1' },
  ],
};

describe.each([
  ['on one Redis', undefined],
  ['on two shards', SHARDED],
] as const)('tenant data %s', (_name, config) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ tools: testTools, ...(config ? { config } : {}) });
  });
  afterAll(async () => {
    await stack?.close();
  });

  async function json(res: Response) {
    return { status: res.status, body: await res.json() };
  }

  const execute = (tool: string, args: unknown, key: string, client: string = KEYS.alice) =>
    stack
      .call(`/tools/${tool}/execute`, {
        json: args,
        key: client,
        headers: { 'idempotency-key': key },
      })
      .then(json);

  describe('Idempotency-Key is bound to the request', () => {
    beforeEach(() => {
      counter.runs = 0;
    });

    it('the same key on another tool or other arguments is 422 idempotency_mismatch, never the first result', async () => {
      const first = await execute('calculator', { expression: '6*7' }, 'k-mismatch');
      expect(first).toMatchObject({ status: 200, body: { status: 'ok', result: 42 } });

      const otherTool = await execute('current_time', {}, 'k-mismatch');
      expect(otherTool.status).toBe(422);
      expect(otherTool.body).toEqual({
        error: {
          code: 'idempotency_mismatch',
          message: expect.stringContaining('different request'),
          details: { callId: first.body.id },
        },
      });
      const otherArgs = await execute('calculator', { expression: '1+1' }, 'k-mismatch');
      expect(otherArgs.status).toBe(422);
      expect(otherArgs.body.error.code).toBe('idempotency_mismatch');

      // The same request again is still a retry: the first call, not a second run.
      const retry = await execute('calculator', { expression: '6*7' }, 'k-mismatch');
      expect(retry).toEqual(first);
    });

    it('arguments are compared canonically: the same arguments in another key order are the same request', async () => {
      const first = await execute('wipe_disk', { disk: 'sda', token: 't' }, 'k-order');
      expect(first).toMatchObject({ status: 202, body: { status: 'pending_approval' } });
      const again = await execute('wipe_disk', { token: 't', disk: 'sda' }, 'k-order');
      expect(again).toEqual(first);
    });

    it('keys belong to the client: another client with the same key runs its own call', async () => {
      await execute('count_runs', {}, 'k-client');
      const bob = await execute('calculator', { expression: '2*2' }, 'k-client', KEYS.bob);
      expect(bob).toMatchObject({ status: 200, body: { status: 'ok', result: 4 } });
    });
  });

  describe('tool call ids in the bridge', () => {
    beforeEach(() => {
      counter.runs = 0;
    });

    const chat = (name: string, args: unknown, id?: string) => ({
      tool_calls: [
        {
          ...(id === undefined ? {} : { id }),
          type: 'function',
          function: { name, arguments: JSON.stringify(args) },
        },
      ],
    });
    const bridge = async (body: unknown) => {
      const res = await stack.call('/v1/tool-calls', { json: body });
      return { status: res.status, body: await res.json() };
    };

    it('calls without an id in different conversations each get their own result', async () => {
      const a = await bridge(chat('calculator', { expression: '6*7' }));
      expect(a.body.messages).toEqual([{ role: 'tool', tool_call_id: 'call_0', content: '42' }]);
      const b = await bridge(chat('current_time', {}));
      expect(b.status).toBe(200);
      expect(b.body.messages[0].tool_call_id).toBe('call_0');
      expect(b.body.messages[0].content).not.toBe('42');
      expect(JSON.parse(b.body.messages[0].content)).toHaveProperty('iso');

      // Anthropic's positional ids too.
      const blocks = (name: string, input: unknown) => ({
        content: [{ type: 'tool_use', name, input }],
      });
      const c = await bridge(blocks('calculator', { expression: '6*7' }));
      const d = await bridge(blocks('calculator', { expression: '1+1' }));
      expect(c.body.messages[0].content[0]).toMatchObject({
        tool_use_id: 'toolu_0',
        content: '42',
      });
      expect(d.body.messages[0].content[0]).toMatchObject({ tool_use_id: 'toolu_0', content: '2' });

      // Without an id a re-sent call is a new call.
      await bridge(chat('count_runs', {}));
      await bridge(chat('count_runs', {}));
      expect(counter.runs).toBe(2);
    });

    it('a model id reused for another call gets idempotency_mismatch in its slot; a resent call still runs once', async () => {
      const first = await bridge(chat('count_runs', {}, 'call_same'));
      expect(first.body.messages[0].content).toBe('1');
      const resent = await bridge(chat('count_runs', {}, 'call_same'));
      expect(resent.body).toEqual(first.body);
      expect(counter.runs).toBe(1);

      const reused = await bridge(chat('calculator', { expression: '1+1' }, 'call_same'));
      expect(reused.status).toBe(200);
      expect(reused.body.messages[0].tool_call_id).toBe('call_same');
      expect(JSON.parse(reused.body.messages[0].content)).toEqual({
        error: {
          code: 'idempotency_mismatch',
          message: expect.stringContaining('different request'),
        },
      });
    });
  });

  describe('/v1/stats visibility', () => {
    let own: Stack;
    beforeAll(async () => {
      own = await startStack({ tools: testTools });
    });
    afterAll(async () => {
      await own?.close();
    });
    const run = async (tool: string, args: unknown, key: string) =>
      (await (await own.call(`/tools/${tool}/execute`, { json: args, key })).json()) as {
        id: string;
      };
    const stats = async (key: string, query = '') => {
      const res = await own.call(`/v1/stats${query}`, { key });
      return { status: res.status, body: await res.json() };
    };
    type Summary = { id: string; tool: string; client: string };

    it('a client sees only its own calls and tools in its scope; admins see all, or one client', async () => {
      const alice = [
        await run('count_runs', { label: 'secret-label' }, KEYS.alice),
        await run('calculator', { expression: '1+1' }, KEYS.alice),
        await run('calculator', { expression: '2+2' }, KEYS.alice),
      ];
      const bob = [await run('calculator', { expression: '3+3' }, KEYS.bob)];
      // The worker writes stats in batches: wait until every call is counted.
      for (let i = 0; i < 100; i++) {
        const { body } = await stats(KEYS.admin);
        if (body.recent.length >= 4) break;
        await new Promise((r) => setTimeout(r, 20));
      }

      const asBob = await stats(KEYS.bob);
      expect(asBob.status).toBe(200);
      expect(asBob.body.tools).toEqual([
        expect.objectContaining({ tool: 'calculator', calls: 1, ok: 1 }),
      ]);
      expect(asBob.body.recent.map((c: Summary) => c.id)).toEqual(bob.map((c) => c.id));
      expect(asBob.body.slowestCalls.map((c: Summary) => c.id)).toEqual(bob.map((c) => c.id));
      expect(asBob.body.rankings.mostCalled).toEqual(['calculator']);
      const text = JSON.stringify(asBob.body);
      for (const call of alice) expect(text).not.toContain(call.id);
      expect(text).not.toContain('count_runs');
      expect(text).not.toContain('alice');
      expect(asBob.body.cache).not.toHaveProperty('keys');

      const asAlice = await stats(KEYS.alice);
      expect(
        asAlice.body.tools.map((t: { tool: string; calls: number }) => [t.tool, t.calls]),
      ).toEqual([
        ['calculator', 2],
        ['count_runs', 1],
      ]);
      expect(asAlice.body.recent.map((c: Summary) => c.client)).toEqual([
        'alice',
        'alice',
        'alice',
      ]);

      const asAdmin = await stats(KEYS.admin);
      expect(asAdmin.body.recent).toHaveLength(4);
      expect(asAdmin.body.tools.find((t: { tool: string }) => t.tool === 'calculator').calls).toBe(
        3,
      );
      expect(asAdmin.body.cache).toHaveProperty('keys');
      const filtered = await stats(KEYS.admin, '?client=bob');
      expect(filtered.body.recent.map((c: Summary) => c.id)).toEqual(bob.map((c) => c.id));

      expect(await stats(KEYS.bob, '?client=alice')).toMatchObject({
        status: 403,
        body: { error: { code: 'forbidden' } },
      });
      expect(await stats(KEYS.admin, '?client=nobody')).toMatchObject({
        status: 400,
        body: { error: { code: 'invalid_request' } },
      });
    });
  });
});
