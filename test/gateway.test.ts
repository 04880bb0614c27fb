import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGateway } from '@toolgate/gateway';
import { createLogger } from '@toolgate/log';
import { createToolRegistry } from '@toolgate/tools';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { counter, testTools } from './support/tools.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    tools: testTools,
    config: { server: { port: 0, host: '127.0.0.1', bodyLimitBytes: 4096, syncWaitGraceMs: 5000 } },
  });
});
afterAll(async () => {
  await stack?.close();
});

async function json(res: Response) {
  return { status: res.status, body: await res.json() };
}

function expectErrorShape(body: unknown, code: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code, message: expect.any(String) }) });
  expect((body as { error: { message: string } }).error.message.length).toBeGreaterThan(5);
}

describe('health', () => {
  it('/healthz and /readyz answer without a key', async () => {
    expect(await json(await stack.call('/healthz', { key: null }))).toEqual({
      status: 200,
      body: { status: 'ok' },
    });
    const ready = await json(await stack.call('/readyz', { key: null }));
    expect(ready).toEqual({ status: 200, body: { status: 'ready', workers: 1 } });
  });

  it('/metrics is Prometheus text on the metrics listener', async () => {
    const res = await fetch(stack.metricsUrl);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('toolgate_http_requests_total');
  });
});

describe('POST /tools/{name}/execute', () => {
  it('runs calculator through the queue and the worker (docs/spec.md §3 example)', async () => {
    const { status, body } = await json(
      await stack.call('/tools/calculator/execute', { json: { expression: '2*(3+4)' } }),
    );
    expect(status).toBe(200);
    expect(body).toEqual({
      id: expect.any(String),
      tool: 'calculator',
      status: 'ok',
      result: 14,
      durationMs: expect.any(Number),
      cached: false,
    });
  });

  it('runs a tool with no arguments on an empty body', async () => {
    const { status, body } = await json(
      await stack.call('/tools/current_time/execute', { method: 'POST' }),
    );
    expect(status).toBe(200);
    expect(body.result.timezone).toBe('UTC');
  });

  it('a failing tool is a 200 with a readable error, and the worker lives on', async () => {
    for (const [how, code, message] of [
      ['error', 'tool_error', 'explode failed: kaboom'],
      ['string', 'tool_error', 'explode failed: a bare string'],
      ['tool_error', 'upstream_down', 'the upstream service is down'],
    ] as const) {
      const { status, body } = await json(
        await stack.call('/tools/explode/execute', { json: { how } }),
      );
      expect(status).toBe(200);
      expect(body).toMatchObject({ tool: 'explode', status: 'error', error: { code, message } });
    }
    const next = await json(
      await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } }),
    );
    expect(next.body.result).toBe(2);
  });

  it('a ToolError keeps its details', async () => {
    const { body } = await json(
      await stack.call('/tools/explode/execute', { json: { how: 'tool_error' } }),
    );
    expect(body.error.details).toEqual({ retryInSeconds: 5 });
  });

  it('a tool past its timeout ends with code timeout', async () => {
    const { status, body } = await json(
      await stack.call('/tools/sleep/execute', { json: { ms: 10_000 } }),
    );
    expect(status).toBe(200);
    expect(body).toMatchObject({
      status: 'error',
      error: { code: 'timeout', message: expect.stringContaining('2000 ms') },
    });
    expect(body.durationMs).toBeGreaterThanOrEqual(1900);
  });

  it('?wait=false answers 202 at once; GET /v1/calls/{id} follows the call to its result', async () => {
    const res = await stack.call('/tools/sleep/execute?wait=false', { json: { ms: 300 } });
    expect(res.status).toBe(202);
    const accepted = await res.json();
    expect(accepted).toEqual({ id: expect.any(String), status: 'queued' });
    expect(res.headers.get('location')).toBe(`/v1/calls/${accepted.id}`);
    const seen = new Set<string>();
    let last: { status: string; result?: unknown } = { status: 'queued' };
    for (let i = 0; i < 100 && last.status !== 'ok'; i++) {
      last = await (await stack.call(`/v1/calls/${accepted.id}`)).json();
      seen.add(last.status);
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(last).toMatchObject({
      id: accepted.id,
      tool: 'sleep',
      status: 'ok',
      result: { slept: 300 },
    });
    expect(seen.has('running')).toBe(true);
  });

  it('Prefer: respond-async also answers 202', async () => {
    const res = await stack.call('/tools/calculator/execute', {
      json: { expression: '6*7' },
      headers: { prefer: 'respond-async' },
    });
    expect(res.status).toBe(202);
    const { id } = await res.json();
    let body;
    for (let i = 0; i < 50; i++) {
      body = await (await stack.call(`/v1/calls/${id}`)).json();
      if (body.status === 'ok') break;
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(body).toMatchObject({ status: 'ok', result: 42 });
  });

  describe('Idempotency-Key', () => {
    beforeEach(() => {
      counter.runs = 0;
    });

    it('a retried request returns the first call instead of running again', async () => {
      const headers = { 'idempotency-key': 'retry-me-1' };
      const first = await json(
        await stack.call('/tools/count_runs/execute', { json: {}, headers }),
      );
      const second = await json(
        await stack.call('/tools/count_runs/execute', { json: {}, headers }),
      );
      expect(first.body.status).toBe('ok');
      expect(second.body).toEqual(first.body);
      expect(counter.runs).toBe(1);
    });

    it('concurrent duplicates run the tool once', async () => {
      const headers = { 'idempotency-key': 'retry-me-2' };
      const results = await Promise.all(
        Array.from({ length: 5 }, () =>
          stack.call('/tools/count_runs/execute', { json: {}, headers }).then(json),
        ),
      );
      expect(new Set(results.map((r) => r.body.id)).size).toBe(1);
      expect(results.every((r) => r.status === 200 && r.body.result === 1)).toBe(true);
      expect(counter.runs).toBe(1);
    });

    it('a retry on another gateway waits for the running call and answers soon after it ends', async () => {
      // The first request's reply goes to its own gateway: the other one finds the outcome by
      // its fallback check (at 1, 3, 7… s of its wait), not by the tool's timeout.
      const other = createGateway({
        config: stack.config,
        registry: createToolRegistry(testTools),
        logger: createLogger('t', { level: 'silent' }),
      });
      const { port } = await other.listen(0, '127.0.0.1');
      // Past the first seconds of its reply subscriber, when every check reads Redis anyway.
      await new Promise((r) => setTimeout(r, 5500));
      try {
        const headers = { 'idempotency-key': 'retry-elsewhere' };
        const first = stack.call('/tools/sleep/execute', { json: { ms: 300 }, headers }).then(json);
        await new Promise((r) => setTimeout(r, 100));
        const asked = performance.now();
        const retry = await fetch(`http://127.0.0.1:${port}/tools/sleep/execute`, {
          method: 'POST',
          headers: {
            ...headers,
            authorization: `Bearer ${KEYS.alice}`,
            'content-type': 'application/json',
          },
          body: JSON.stringify({ ms: 300 }),
        }).then(json);
        const waited = performance.now() - asked;
        expect(retry).toMatchObject({
          status: 200,
          body: { status: 'ok', result: { slept: 300 } },
        });
        expect(retry.body.id).toBe((await first).body.id);
        // The sleep tool's timeout is 2 s: its wait would run past it.
        expect(waited).toBeLessThan(1800);
      } finally {
        await other.close();
      }
    });

    it('keys are per client', async () => {
      const headers = { 'idempotency-key': 'shared-key' };
      const a = await json(
        await stack.call('/tools/calculator/execute', { json: { expression: '1' }, headers }),
      );
      const b = await json(
        await stack.call('/tools/calculator/execute', {
          json: { expression: '2' },
          headers,
          key: KEYS.bob,
        }),
      );
      expect(a.body.id).not.toBe(b.body.id);
      expect(b.body.result).toBe(2);
    });
  });
});

describe('GET /v1/calls/{id}', () => {
  it('is private to the client that made the call (admins see all)', async () => {
    const { body } = await json(
      await stack.call('/tools/calculator/execute', { json: { expression: '3' } }),
    );
    expect((await stack.call(`/v1/calls/${body.id}`, { key: KEYS.bob })).status).toBe(404);
    const asAdmin = await json(await stack.call(`/v1/calls/${body.id}`, { key: KEYS.admin }));
    expect(asAdmin).toMatchObject({ status: 200, body: { status: 'ok', result: 3 } });
  });

  it('unknown ids are 404 not_found', async () => {
    const { status, body } = await json(await stack.call('/v1/calls/does-not-exist'));
    expect(status).toBe(404);
    expectErrorShape(body, 'not_found');
  });
});

describe('error rows of docs/spec.md §3', () => {
  it('401 unauthorized: missing or unknown key', async () => {
    for (const key of [null, 'not-a-real-key']) {
      const { status, body } = await json(await stack.call('/tools', { key }));
      expect(status).toBe(401);
      expectErrorShape(body, 'unauthorized');
    }
    const malformed = await stack.call('/tools', {
      key: null,
      headers: { authorization: 'Basic abc' },
    });
    expect(malformed.status).toBe(401);
  });

  it('403 forbidden: a tool outside the client scope', async () => {
    const { status, body } = await json(
      await stack.call('/tools/count_runs/execute', { json: {}, key: KEYS.bob }),
    );
    expect(status).toBe(403);
    expectErrorShape(body, 'forbidden');
  });

  it('404 unknown_tool', async () => {
    const { status, body } = await json(await stack.call('/tools/nope/execute', { json: {} }));
    expect(status).toBe(404);
    expectErrorShape(body, 'unknown_tool');
  });

  it('400 invalid_json: not JSON, or not an object', async () => {
    for (const raw of ['{"expression": ', '[1,2]', '"text"', '42', 'null']) {
      const { status, body } = await json(
        await stack.call('/tools/calculator/execute', { json: raw }),
      );
      expect(status, raw).toBe(400);
      expectErrorShape(body, 'invalid_json');
    }
  });

  it('400 invalid_arguments with the validator errors as details', async () => {
    const { status, body } = await json(
      await stack.call('/tools/calculator/execute', { json: { expression: 5, extra: true } }),
    );
    expect(status).toBe(400);
    expectErrorShape(body, 'invalid_arguments');
    expect(body.error.details).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ path: '/expression', keyword: 'type' }),
        expect.objectContaining({
          keyword: 'additionalProperties',
          params: { additionalProperty: 'extra' },
        }),
      ]),
    );
  });

  it('413 payload_too_large', async () => {
    const { status, body } = await json(
      await stack.call('/tools/calculator/execute', {
        json: { expression: '1+'.repeat(5000) + '1' },
      }),
    );
    expect(status).toBe(413);
    expectErrorShape(body, 'payload_too_large');
  });

  it('unknown routes are 404 not_found in the same shape', async () => {
    const { status, body } = await json(await stack.call('/nope'));
    expect(status).toBe(404);
    expectErrorShape(body, 'not_found');
  });
});
