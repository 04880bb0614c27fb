import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.close();
  stack = undefined;
});

async function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer().listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

describe('503 unavailable', () => {
  it('no worker alive: calls are refused and /readyz says why', async () => {
    stack = await startStack({ worker: false });
    const res = await stack.call('/tools/calculator/execute', { json: { expression: '1' } });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBeTruthy();
    expect(await res.json()).toEqual({
      error: { code: 'unavailable', message: expect.stringContaining('no worker') },
    });
    const ready = await stack.call('/readyz', { key: null });
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({ status: 'unavailable', reason: 'no worker is alive' });
  });

  it('Redis unreachable: calls are refused with 503, listings still work, /healthz stays up', async () => {
    const port = await closedPort();
    stack = await startStack({
      worker: false,
      config: { redis: { url: `redis://127.0.0.1:${port}`, prefix: 'down' } },
    });
    const res = await stack.call('/tools/calculator/execute', { json: { expression: '1' } });
    expect(res.status).toBe(503);
    expect((await res.json()).error).toMatchObject({
      code: 'unavailable',
      message: expect.stringContaining('Redis'),
    });
    const bridge = await stack.call('/v1/tool-calls', {
      json: {
        tool_calls: [
          {
            id: 'a',
            type: 'function',
            function: { name: 'calculator', arguments: '{"expression":"1"}' },
          },
        ],
      },
    });
    expect(bridge.status).toBe(503);
    expect((await stack.call('/v1/calls/00000000-0000-4000-8000-000000000000')).status).toBe(503);
    expect((await stack.call('/tools/openai')).status).toBe(200);
    expect((await stack.call('/healthz', { key: null })).status).toBe(200);
    const ready = await stack.call('/readyz', { key: null });
    expect(ready.status).toBe(503);
    expect((await ready.json()).reason).toContain('Redis');
  });
});

describe('graceful shutdown', () => {
  it('a closing worker finishes the call it is running and takes no new ones', async () => {
    stack = await startStack({ tools: testTools });
    const accepted = await (
      await stack.call('/tools/sleep/execute?wait=false', { json: { ms: 700 } })
    ).json();
    for (let i = 0; i < 50; i++) {
      const { status } = await (await stack.call(`/v1/calls/${accepted.id}`)).json();
      if (status === 'running') break;
      await new Promise((r) => setTimeout(r, 20));
    }
    await stack.worker!.close();
    const done = await (await stack.call(`/v1/calls/${accepted.id}`)).json();
    expect(done).toMatchObject({ status: 'ok', result: { slept: 700 } });
    const late = await (
      await stack.call('/tools/calculator/execute?wait=false', { json: { expression: '1' } })
    ).json();
    await new Promise((r) => setTimeout(r, 300));
    expect((await (await stack.call(`/v1/calls/${late.id}`)).json()).status).toBe('queued');
  });

  it('a closing gateway answers the requests already in flight', async () => {
    stack = await startStack({ tools: testTools });
    const inFlight = stack.call('/tools/sleep/execute', { json: { ms: 500 } });
    await new Promise((r) => setTimeout(r, 150));
    const closing = stack.gateway.close();
    const res = await inFlight;
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', result: { slept: 500 } });
    await closing;
    await expect(fetch(`${stack.url}/healthz`)).rejects.toThrow();
  });
});
