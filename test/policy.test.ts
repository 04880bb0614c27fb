import { createGateway } from '@toolgate/gateway';
import { createLogger } from '@toolgate/log';
import { createToolRegistry } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { counter, testTools } from './support/tools.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    tools: testTools,
    config: {
      server: { port: 0, host: '127.0.0.1', sweepIntervalMs: 200 },
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 1000 } },
        { id: 'bob', key: KEYS.bob, tools: ['*'], rateLimit: { perMinute: 3 } },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      policy: {
        loopGuard: { maxCalls: 4, windowSeconds: 60 },
        approval: { tools: ['count_runs'], ttlSeconds: 2 },
      },
    },
  });
});
afterAll(async () => {
  await stack?.close();
});

/** Another gateway on the same Redis, as behind a load balancer. */
async function secondGateway() {
  const second = createGateway({
    config: stack.config,
    registry: createToolRegistry(testTools),
    logger: createLogger('t', { level: 'silent' }),
  });
  const { port } = await second.listen(0, '127.0.0.1');
  return { second, port };
}

const post = async (
  path: string,
  json: unknown,
  init: { key?: string; headers?: Record<string, string> } = {},
) => {
  const res = await stack.call(path, { json, ...init });
  return { status: res.status, headers: res.headers, body: await res.json() };
};
const get = async (path: string, key: string = KEYS.admin) => {
  const res = await stack.call(path, { key });
  return { status: res.status, body: await res.json() };
};

describe('rate limit', () => {
  it('429 rate_limited with Retry-After once a client passes its perMinute', async () => {
    for (let i = 0; i < 3; i++) {
      expect(
        (await post('/tools/calculator/execute', { expression: '1' }, { key: KEYS.bob })).status,
      ).toBe(200);
    }
    const limited = await post('/tools/calculator/execute', { expression: '1' }, { key: KEYS.bob });
    expect(limited.status).toBe(429);
    expect(limited.body.error).toMatchObject({
      code: 'rate_limited',
      message: expect.stringContaining('3 calls per minute'),
    });
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    // other clients are not affected
    expect((await post('/tools/calculator/execute', { expression: '1' })).status).toBe(200);
    // the bridge refuses the whole request for a client over its rate
    const bridged = await post(
      '/v1/tool-calls',
      {
        tool_calls: [
          {
            id: 'x',
            type: 'function',
            function: { name: 'calculator', arguments: '{"expression":"1"}' },
          },
        ],
      },
      { key: KEYS.bob },
    );
    expect(bridged.status).toBe(429);
  });

  it('is counted in Redis, so a second gateway on the same Redis sees the same budget', async () => {
    const { second, port } = await secondGateway();
    try {
      const res = await fetch(`http://127.0.0.1:${port}/tools/calculator/execute`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEYS.bob}`, 'content-type': 'application/json' },
        body: '{"expression":"1"}',
      });
      expect(res.status).toBe(429);
    } finally {
      await second.close();
    }
  });
});

describe('loop guard', () => {
  it('429 loop_limit past maxCalls per X-Conversation-Id, with a message the model can relay', async () => {
    const headers = { 'x-conversation-id': 'conv-loop-1' };
    for (let i = 0; i < 4; i++)
      expect(
        (await post('/tools/calculator/execute', { expression: '1' }, { headers })).status,
      ).toBe(200);
    const looped = await post('/tools/calculator/execute', { expression: '1' }, { headers });
    expect(looped.status).toBe(429);
    expect(looped.body.error.code).toBe('loop_limit');
    expect(looped.body.error.message).toMatch(/Stop calling tools/);
    // another conversation is fine
    expect(
      (
        await post(
          '/tools/calculator/execute',
          { expression: '1' },
          { headers: { 'x-conversation-id': 'conv-loop-2' } },
        )
      ).status,
    ).toBe(200);
  });

  it('in the bridge, the loop message lands in the slot for the model to read', async () => {
    const headers = { 'x-conversation-id': 'conv-loop-3' };
    const call = (id: string) => ({
      id,
      type: 'function',
      function: { name: 'calculator', arguments: '{"expression":"2"}' },
    });
    const res = await post(
      '/v1/tool-calls',
      { tool_calls: [1, 2, 3, 4, 5].map((i) => call(`l${i}`)) },
      { headers },
    );
    expect(res.status).toBe(200);
    const contents = res.body.messages.map((m: { content: string }) => m.content);
    expect(contents.filter((c: string) => c === '2')).toHaveLength(4);
    expect(JSON.parse(contents.find((c: string) => c !== '2')).error.code).toBe('loop_limit');
  });
});

describe('human approval', () => {
  it('a destructive tool parks as pending_approval; an admin approves; it runs and the result appears', async () => {
    const parked = await post('/tools/wipe_disk/execute', { disk: 'sdb', token: 'hunter2-secret' });
    expect(parked.status).toBe(202);
    expect(parked.body).toEqual({ id: expect.any(String), status: 'pending_approval' });
    expect((await get(`/v1/calls/${parked.body.id}`, KEYS.alice)).body.status).toBe(
      'pending_approval',
    );

    const list = await get('/v1/approvals');
    const entry = list.body.find((a: { id: string }) => a.id === parked.body.id);
    expect(entry).toMatchObject({
      tool: 'wipe_disk',
      client: 'alice',
      arguments: { disk: 'sdb', token: '[redacted]' },
    });

    expect((await get('/v1/approvals', KEYS.alice)).status).toBe(403);
    expect(
      (await post(`/v1/approvals/${parked.body.id}/approve`, {}, { key: KEYS.alice })).status,
    ).toBe(403);

    const approved = await post(`/v1/approvals/${parked.body.id}/approve`, {}, { key: KEYS.admin });
    expect(approved).toMatchObject({
      status: 200,
      body: { id: parked.body.id, decision: 'approved', by: 'ops' },
    });
    let call;
    for (let i = 0; i < 50; i++) {
      call = (await get(`/v1/calls/${parked.body.id}`, KEYS.alice)).body;
      if (call.status === 'ok') break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(call).toMatchObject({ status: 'ok', result: 'wiped sdb' });
    // a second decision is a conflict
    expect(
      (await post(`/v1/approvals/${parked.body.id}/reject`, {}, { key: KEYS.admin })).status,
    ).toBe(409);
  });

  it('a rejected call never runs and says who rejected it and why', async () => {
    counter.runs = 0;
    const parked = await post('/tools/count_runs/execute', {}); // listed in policy.approval.tools
    expect(parked.body.status).toBe('pending_approval');
    const rejected = await post(
      `/v1/approvals/${parked.body.id}/reject`,
      { reason: 'not today' },
      { key: KEYS.admin },
    );
    expect(rejected.body.decision).toBe('rejected');
    const call = (await get(`/v1/calls/${parked.body.id}`, KEYS.alice)).body;
    expect(call).toMatchObject({
      status: 'rejected',
      error: { code: 'rejected', message: expect.stringContaining('not today') },
    });
    expect(counter.runs).toBe(0);
  });

  it('pending calls expire after ttlSeconds', async () => {
    const parked = await post('/tools/wipe_disk/execute', { disk: 'sdc' });
    await new Promise((r) => setTimeout(r, 2600));
    const call = (await get(`/v1/calls/${parked.body.id}`, KEYS.alice)).body;
    expect(call).toMatchObject({ status: 'expired', error: { code: 'expired' } });
    expect(
      (await post(`/v1/approvals/${parked.body.id}/approve`, {}, { key: KEYS.admin })).status,
    ).toBe(409);
  });

  it('the bridge puts a readable "awaiting approval" result in the slot', async () => {
    const res = await post('/v1/tool-calls', {
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'toolu_wipe', name: 'wipe_disk', input: { disk: 'sdd' } }],
    });
    const block = res.body.messages[0].content[0];
    expect(block.is_error).toBeUndefined();
    expect(JSON.parse(block.content)).toMatchObject({
      status: 'pending_approval',
      message: expect.stringContaining('awaiting approval'),
    });
  });

  it('every decision is audited with who made it', async () => {
    const audit = await get('/v1/audit?event=approval');
    expect(audit.status).toBe(200);
    const decisions = audit.body.map((e: { status: string; by: string }) => `${e.status}:${e.by}`);
    expect(decisions).toEqual(
      expect.arrayContaining(['approved:ops', 'rejected:ops', 'expired:system']),
    );
  });
});

describe('audit', () => {
  it('admin only; lists who called what with redacted arguments, status and duration', async () => {
    await post('/tools/explode/execute', { how: 'error' });
    await post(
      '/tools/calculator/execute',
      { expression: 'x' },
      { headers: { authorization: 'Bearer nope' } },
    );
    expect((await get('/v1/audit', KEYS.alice)).status).toBe(403);
    // Workers write audit entries in batches (within ~10 ms of the answer): wait for it.
    let audit = await get('/v1/audit?limit=1000');
    for (
      let i = 0;
      i < 50 && !audit.body.some((e: { tool: string }) => e.tool === 'explode');
      i++
    ) {
      await new Promise((r) => setTimeout(r, 20));
      audit = await get('/v1/audit?limit=1000');
    }
    const exploded = audit.body.find((e: { tool: string }) => e.tool === 'explode');
    expect(exploded).toMatchObject({
      event: 'call',
      client: 'alice',
      status: 'error:tool_error',
      args: { how: 'error' },
      durationMs: expect.any(Number),
      at: expect.any(String),
    });
    const wiped = audit.body.find(
      (e: { tool: string; event: string }) => e.tool === 'wipe_disk' && e.event === 'call',
    );
    expect(wiped).toMatchObject({ by: 'ops', args: { disk: 'sdb', token: '[redacted]' } });
    expect(JSON.stringify(audit.body)).not.toContain('hunter2-secret');
    const refused = await get('/v1/audit?event=refused&client=bob');
    expect(refused.body[0]).toMatchObject({ status: 'rate_limited', client: 'bob' });
  });
});

describe('stats and cache', () => {
  it('a cacheable tool answers a repeated call from the cache until its TTL passes', async () => {
    counter.runs = 0;
    const first = await post('/tools/lookup/execute', { q: 'weather', page: 1 });
    const second = await post('/tools/lookup/execute', { page: 1, q: 'weather' }); // same arguments, other order
    expect(first.body).toMatchObject({ status: 'ok', cached: false, result: { run: 1 } });
    expect(second.body).toMatchObject({ status: 'ok', cached: true, result: { run: 1 } });
    const other = await post('/tools/lookup/execute', { q: 'news' });
    expect(other.body.cached).toBe(false);
    await new Promise((r) => setTimeout(r, 1300));
    const third = await post('/tools/lookup/execute', { q: 'weather', page: 1 });
    expect(third.body).toMatchObject({ cached: false, result: { run: 3 } });
  });

  it('GET /v1/stats reports per tool, rankings, slowest calls and the cache', async () => {
    await new Promise((r) => setTimeout(r, 1300)); // let the sweeper count the expired entries
    const { status, body } = await get('/v1/stats', KEYS.admin);
    expect(status).toBe(200);
    const calc = body.tools.find((t: { tool: string }) => t.tool === 'calculator');
    expect(calc).toMatchObject({
      calls: expect.any(Number),
      ok: expect.any(Number),
      errors: 0,
      errorRate: 0,
    });
    expect(calc.calls).toBeGreaterThanOrEqual(10);
    expect(calc.p95Ms).toBeGreaterThanOrEqual(0);
    const explode = body.tools.find((t: { tool: string }) => t.tool === 'explode');
    expect(explode).toMatchObject({ errors: 1, errorRate: 1 });
    expect(body.rankings.highestErrorRate[0]).toBe('explode');
    expect(body.rankings.mostCalled[0]).toBe('calculator');
    expect(body.recent.length).toBeGreaterThan(5);
    expect(body.slowestCalls[0].durationMs).toBeGreaterThanOrEqual(
      body.slowestCalls.at(-1).durationMs,
    );
    expect(body.cache).toMatchObject({ hits: 1, misses: 3, hitRate: 0.25 });
    expect(body.cache.evictions).toBeGreaterThanOrEqual(2);
    // A client's own view counts its own lookups; the shared cache's size is for admins.
    const own = (await get('/v1/stats', KEYS.alice)).body;
    expect(own.cache).toEqual({ hits: 1, misses: 3, hitRate: 0.25 });
  });

  it('stats live in Redis: a fresh gateway reports the same numbers', async () => {
    const before = (await get('/v1/stats')).body;
    const { second, port } = await secondGateway();
    try {
      const res = await fetch(`http://127.0.0.1:${port}/v1/stats`, {
        headers: { authorization: `Bearer ${KEYS.admin}` },
      });
      const after = await res.json();
      expect(after.tools).toEqual(before.tools);
    } finally {
      await second.close();
    }
  });
});

describe('tool policy', () => {
  it('run_shell commands the blocklist denies end with policy_denied and the rule, without running', async () => {
    const res = await post('/tools/run_shell/execute', { command: 'cd /tmp && rm -rf /' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      tool: 'run_shell',
      status: 'error',
      error: { code: 'policy_denied', details: { rule: expect.any(String) } },
    });
    const audit = await get('/v1/audit?tool=run_shell');
    expect(audit.body[0]).toMatchObject({ status: 'error:policy_denied', reason: 'tool policy' });
  });

  it('http_get refuses loopback addresses (SSRF) with blocked_address', async () => {
    const { createServer } = await import('node:http');
    let hits = 0;
    const server = createServer((_req, res) => {
      hits++;
      res.end('secret');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    try {
      for (const url of [
        `http://127.0.0.1:${port}/`,
        `http://localhost:${port}/`,
        `http://2130706433:${port}/`,
        `http://[::ffff:127.0.0.1]:${port}/`,
      ]) {
        const res = await post('/tools/http_get/execute', { url });
        expect(res.body, url).toMatchObject({
          status: 'error',
          error: { code: 'blocked_address' },
        });
      }
      expect(hits).toBe(0);
    } finally {
      server.close();
    }
  });
});
