/**
 * An upstream whose schemas carry patterns that backtrack for hours on V8 (docs/upstreams.md,
 * "Schemas"): the gateway checks a model's arguments against them and the worker checks the
 * upstream's structured results, both in linear time, so a concurrent /healthz is answered at
 * once; a pattern RE2 cannot run is left to the upstream and shown in GET /v1/upstreams.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { NodeStreamableHTTPServerTransport } from '@modelcontextprotocol/node';
import { Server, type CallToolResult, type Tool } from '@modelcontextprotocol/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

const LONG = 150_000;

/** The hostile upstream's tools: catastrophic patterns on arguments and results. */
const TOOLS: Tool[] = [
  {
    name: 'grep',
    description: 'Takes strings under patterns that backtrack',
    inputSchema: {
      type: 'object',
      properties: {
        nested: { type: 'string', pattern: '^(a+)+$' },
        star: { type: 'string', pattern: 'a*b' },
        items: { type: 'array', items: { type: 'string', pattern: 'a*a*a*b' } },
        password: { type: 'string', pattern: '^(?=.*\\d).{8,}$' },
      },
    },
    annotations: { readOnlyHint: true },
  },
  {
    name: 'report',
    description: 'Answers a structured result its own schema backtracks on',
    inputSchema: { type: 'object', properties: {} },
    outputSchema: {
      type: 'object',
      properties: { text: { type: 'string', pattern: 'a*b' } },
      required: ['text'],
    },
    annotations: { readOnlyHint: true },
  },
];

async function startHostileUpstream(): Promise<{ url: string; close(): Promise<void> }> {
  const sessions = new Map<string, NodeStreamableHTTPServerTransport>();
  const makeServer = () => {
    const server = new Server(
      { name: 'hostile', version: '1.0.0' },
      { capabilities: { tools: {} } },
    );
    server.setRequestHandler('tools/list', () => ({ tools: TOOLS }));
    server.setRequestHandler('tools/call', (request): CallToolResult => {
      if (request.params.name === 'report')
        return {
          content: [{ type: 'text', text: 'a long report' }],
          structuredContent: { text: 'a'.repeat(LONG) },
        };
      return { content: [{ type: 'text', text: 'ran' }] };
    });
    return server;
  };
  const http: HttpServer = createServer((req, res) => {
    void (async () => {
      const sid = req.headers['mcp-session-id'];
      let transport = typeof sid === 'string' ? sessions.get(sid) : undefined;
      if (!transport) {
        const created = new NodeStreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => void sessions.set(id, created),
        });
        await makeServer().connect(created);
        transport = created;
      }
      await transport.handleRequest(req, res);
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    async close() {
      for (const t of sessions.values()) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

/** `work()` and a /healthz sent while it runs: how long each took to answer. */
async function withHealthz<T>(stack: Stack, work: () => Promise<T>) {
  const started = Date.now();
  const pending = work().then((value) => ({ value, ms: Date.now() - started }));
  // sent once the work is under way (its request read, its check running)
  await new Promise((r) => setTimeout(r, 50));
  const healthStarted = Date.now();
  const health = await stack.call('/healthz', { key: null });
  const healthMs = Date.now() - healthStarted;
  expect(health.status).toBe(200);
  return { ...(await pending), healthMs };
}

describe('upstream schema patterns run in linear time', () => {
  let stack: Stack;
  let upstream: Awaited<ReturnType<typeof startHostileUpstream>>;

  beforeAll(async () => {
    upstream = await startHostileUpstream();
    stack = await startStack({
      config: {
        policy: { http: { allowHosts: ['127.0.0.1'] } },
        upstreams: [{ id: 'hostile', url: upstream.url, trust: 'auto' }],
      },
    });
    // the catalog is read once the processes start: wait for its tools to be served
    for (let i = 0; i < 100; i++) {
      const res = await stack.call('/tools');
      const names = ((await res.json()) as { name: string }[]).map((t) => t.name);
      if (names.includes('hostile__report')) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
    await upstream?.close();
  });

  const execute = (tool: string, json: unknown) =>
    stack.call(`/tools/hostile__${tool}/execute`, { json });

  it('answers an adversarial 150,000-character argument at once, and /healthz meanwhile', async () => {
    // `a*b` on 150,000 characters kept the gateway busy 18.5 s, /healthz waiting 18.4 s
    const star = await withHealthz(stack, () => execute('grep', { star: 'a'.repeat(LONG) }));
    expect(star.value.status).toBe(400);
    expect(await star.value.json()).toMatchObject({
      error: { code: 'invalid_arguments', details: [{ path: '/star', keyword: 'pattern' }] },
    });
    expect(star.ms).toBeLessThan(3000);
    expect(star.healthMs).toBeLessThan(1000);
    // `^(a+)+$`: never run by V8 before (left to the upstream), now enforced
    const nested = await withHealthz(stack, () =>
      execute('grep', { nested: `${'a'.repeat(LONG)}b` }),
    );
    expect(nested.value.status).toBe(400);
    expect(nested.ms).toBeLessThan(3000);
    expect(nested.healthMs).toBeLessThan(1000);
    const ok = await execute('grep', { nested: 'a'.repeat(LONG) });
    expect(await ok.json()).toMatchObject({ status: 'ok', result: 'ran' });
  });

  it('checks every item of an array of adversarial strings at once', async () => {
    // 2.8 s per 256-character item before, for every item
    const items = Array.from({ length: 500 }, () => 'a'.repeat(256));
    const res = await withHealthz(stack, () => execute('grep', { items }));
    expect(res.value.status).toBe(400);
    expect(res.ms).toBeLessThan(3000);
    expect(res.healthMs).toBeLessThan(1000);
  });

  it("checks an upstream's 150,000-character structured result on the worker at once", async () => {
    const port = await stack.worker!.serveMetrics(0);
    const mismatches = async () => {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const line = text
        .split('\n')
        .find(
          (l) =>
            l.startsWith('toolgate_tool_result_mismatches_total{') &&
            l.includes('tool="hostile__report"'),
        );
      return Number(line?.split(' ').pop() ?? 0);
    };
    const before = await mismatches();
    // the gateway and the worker share this process: a check that hangs one hangs /healthz
    const res = await withHealthz(stack, () => execute('report', {}));
    const body = (await res.value.json()) as { status: string; result: { text: string } };
    // returned as it is (docs/tool-results.md), counted as a mismatch of its own schema
    expect(body.status).toBe('ok');
    expect(body.result.text).toHaveLength(LONG);
    expect(await mismatches()).toBe(before + 1);
    expect(res.ms).toBeLessThan(5000);
    expect(res.healthMs).toBeLessThan(1000);
  });

  it('leaves a lookahead to the upstream, and GET /v1/upstreams says so', async () => {
    const res = await execute('grep', { password: 'short' });
    expect(await res.json()).toMatchObject({ status: 'ok', result: 'ran' });
    const report = (await (await stack.call('/v1/upstreams', { key: KEYS.admin })).json()) as {
      id: string;
      unenforcedPatterns: unknown[];
    }[];
    expect(report.find((u) => u.id === 'hostile')!.unenforcedPatterns).toEqual([
      {
        tool: 'grep',
        path: '/inputSchema/properties/password/pattern',
        pattern: '^(?=.*\\d).{8,}$',
        reason: 'lookahead',
      },
    ]);
  });
});
