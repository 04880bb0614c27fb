/**
 * Upstream MCP servers behind toolgate (docs/upstreams.md, slice 1: Streamable HTTP): the real
 * `@modelcontextprotocol/server-everything` in its Streamable HTTP mode, and a test upstream of
 * our own for what it cannot show (cancel arrival, a changing list, a hostile list, isError,
 * going away). Listing in every dialect with scopes, calls through HTTP and MCP, the errors a
 * model reads, /readyz, and the config errors.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createServer } from 'node:net';
import { Client } from '@modelcontextprotocol/client';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { checkConfig, ConfigError, parseConfig } from '@toolgate/config';
import { Type, type AnyToolSpec } from '@toolgate/registry';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { startTelemetry } from '@toolgate/telemetry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, TOOLGATE_BIN } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { startEverything, type Everything } from './support/everything.js';
import { startTestUpstream, type TestUpstream } from './support/test-upstream.js';
import { executeSpan } from './support/spans.js';

// Tracing on, as the services run it: the call's trace must continue into the upstream.
const spans = new InMemorySpanExporter();
const telemetry = startTelemetry({
  serviceName: 'toolgate-test',
  spanProcessors: [new SimpleSpanProcessor({ exporter: spans })],
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function until<T>(what: () => Promise<T> | T, ok: (v: T) => boolean, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await what();
    if (ok(value) || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A local tool whose name an upstream's tool would take: the upstream's is left out. */
const localTestFail: AnyToolSpec = {
  name: 'test__fail',
  description: 'A local tool with an upstream-like name',
  category: 'test',
  parameters: Type.Object({}),
  handler: () => 'local',
};

describe('upstream MCP servers (Streamable HTTP)', () => {
  let stack: Stack;
  let everything: Everything;
  let upstream: TestUpstream;
  let leaving: TestUpstream;
  let huge: TestUpstream;
  let narrow: TestUpstream;
  let plain: TestUpstream;
  let closedPort: number;

  const names = async (path: string, key: string = KEYS.alice): Promise<string[]> => {
    const body = (await (await stack.call(path, { key })).json()) as Record<string, unknown>[];
    return body.map((t) => String(t.name ?? (t.function as { name: string } | undefined)?.name));
  };

  beforeAll(async () => {
    [everything, upstream, leaving, huge, closedPort] = await Promise.all([
      startEverything(),
      startTestUpstream({ chatty: true }),
      startTestUpstream(),
      startTestUpstream({ filler: 700, hugeDescription: 100_000, pageSize: 100 }),
      freePort(),
    ]);
    narrow = await startTestUpstream();
    plain = await startTestUpstream({ jsonResponse: true });
    stack = await startStack({
      tools: [localTestFail],
      config: {
        policy: { http: { allowHosts: ['127.0.0.1'] } },
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['*'] },
          { id: 'bob', key: KEYS.bob, tools: ['current_time', 'everything__*'] },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
        ],
        // trust: auto — these tests are about listing and calling; pinning has its own file
        // (test/upstream-pinning.test.ts).
        upstreams: [
          { id: 'everything', url: everything.url, trust: 'auto' },
          { id: 'test', url: upstream.url, approval: ['sum'], trust: 'auto' },
          { id: 'leaving', url: leaving.url, timeoutMs: 2000, refreshSeconds: 1, trust: 'auto' },
          { id: 'huge', url: huge.url, trust: 'auto' },
          { id: 'narrow', url: narrow.url, concurrency: 2, trust: 'auto' },
          { id: 'plain', url: plain.url, trust: 'auto' },
          {
            id: 'gone',
            url: `http://127.0.0.1:${closedPort}/mcp`,
            timeoutMs: 1000,
            trust: 'auto',
          },
        ],
      },
    });
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
    everything?.child.kill();
    await Promise.all([
      upstream?.close(),
      leaving?.close(),
      huge?.close(),
      narrow?.close(),
      plain?.close(),
    ]);
    await telemetry.shutdown();
  });

  it('lists upstream tools in every dialect, in name order, within each client scope', async () => {
    const all = await names('/tools');
    expect(all).toEqual(
      expect.arrayContaining(['everything__echo', 'everything__get-sum', 'test__echo']),
    );
    expect(all).toEqual([...all].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    for (const path of ['/tools/openai', '/tools/openai-responses', '/tools/anthropic']) {
      expect(await names(path)).toEqual(all);
    }
    // byte-stable: the same bytes twice
    const first = await (await stack.call('/tools/openai?strict=true')).text();
    expect(await (await stack.call('/tools/openai?strict=true')).text()).toBe(first);
    // bob's scope: `everything__*` and one built-in
    const bobs = await names('/tools', KEYS.bob);
    expect(bobs).toContain('everything__echo');
    expect(bobs.every((n) => n === 'current_time' || n.startsWith('everything__'))).toBe(true);
    // the upstream's schema, and `approval:` from the config
    const native = (await (await stack.call('/tools')).json()) as {
      name: string;
      parameters: { required?: string[] };
      requiresApproval: boolean;
    }[];
    expect(native.find((t) => t.name === 'test__echo')?.parameters.required).toEqual(['text']);
    expect(native.find((t) => t.name === 'test__sum')?.requiresApproval).toBe(true);
    expect(native.find((t) => t.name === 'test__echo')?.requiresApproval).toBe(false);
    // a local tool keeps its name: the upstream's `fail` that would take it is left out
    expect(native.find((t) => t.name === 'test__fail')).toMatchObject({ category: 'test' });

    const mcp = new Client({ name: 'test', version: '1' });
    await mcp.connect(
      new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${KEYS.bob}` } },
      }),
    );
    const listed = await mcp.listTools();
    const echo = listed.tools.find((t) => t.name === 'everything__echo');
    expect(echo?.annotations).toMatchObject({ readOnlyHint: true, openWorldHint: false });
    expect(listed.tools.some((t) => t.name.startsWith('test__'))).toBe(false);
    await mcp.close();
  });

  it('calls server-everything echo through HTTP execute and MCP', async () => {
    const res = await stack.call('/tools/everything__echo/execute', { json: { message: 'hi' } });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', result: 'Echo: hi' });

    const mcp = new Client({ name: 'test', version: '1' });
    await mcp.connect(
      new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${KEYS.alice}` } },
      }),
    );
    const result = await mcp.callTool({
      name: 'everything__echo',
      arguments: { message: 'via mcp' },
    });
    expect(result.isError).toBeFalsy();
    expect(JSON.stringify(result.content)).toContain('Echo: via mcp');
    await mcp.close();

    // the call's trace goes on in the upstream: traceparent in _meta, the worker span its parent
    const traced = await stack.call('/tools/test__echo/execute', { json: { text: 'traced' } });
    const { id } = (await traced.json()) as { id: string };
    const execute = await executeSpan(spans, id);
    const { traceId, spanId } = execute.spanContext();
    expect(upstream.metas.at(-1)).toMatchObject({
      traceparent: `00-${traceId}-${spanId}-01`,
      'io.toolgate/call': id,
    });

    // structuredContent is the result
    const sum = await stack.call('/tools/everything__get-sum/execute', { json: { a: 2, b: 3 } });
    expect((await sum.json()) as { status: string }).toMatchObject({ status: 'ok' });
  });

  it("refuses arguments that fail the upstream's schema before queueing them", async () => {
    const before = upstream.metas.length;
    const res = await stack.call('/tools/test__echo/execute', { json: { text: 7 } });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('invalid_arguments');
    expect(upstream.metas.length).toBe(before);
  });

  it("turns the upstream's isError into upstream_error with its text", async () => {
    const res = await stack.call('/tools/leaving__fail/execute', { json: {} });
    const body = (await res.json()) as { status: string; error: { code: string; message: string } };
    expect(body.status).toBe('error');
    expect(body.error.code).toBe('upstream_error');
    expect(body.error.message).toContain('it went wrong upstream');
  });

  it('cuts an upstream answer over 8 MiB: output_limit, and the next call works', async () => {
    const t0 = Date.now();
    const res = await stack.call('/tools/leaving__flood/execute', { json: {} });
    const body = (await res.json()) as { status: string; error: { code: string; message: string } };
    expect(body.error.code).toBe('output_limit');
    expect(body.error.message).toContain('8388608 bytes');
    // cut as it arrives, not after the timeout (2000 ms)
    expect(Date.now() - t0).toBeLessThan(2000);
    const next = await stack.call('/tools/leaving__echo/execute', { json: { text: 'after' } });
    expect(await next.json()).toMatchObject({ status: 'ok', result: 'echo: after' });
  });

  it('reads an upstream that answers in plain JSON: results, structured results, isError', async () => {
    const run = async (tool: string, json: object) =>
      (await (await stack.call(`/tools/plain__${tool}/execute`, { json })).json()) as {
        status: string;
        result?: unknown;
        error?: { code: string; message: string };
      };
    expect(await run('echo', { text: 'json' })).toMatchObject({
      status: 'ok',
      result: 'echo: json',
    });
    expect(await run('sum', { a: 2, b: 3 })).toMatchObject({ status: 'ok', result: { sum: 5 } });
    const failed = await run('fail', {});
    expect(failed.error?.code).toBe('upstream_error');
    expect(failed.error?.message).toContain('it went wrong upstream');
  });

  it('opens a new session when the upstream forgot its own (HTTP 404), and runs the call once', async () => {
    const first = await stack.call('/tools/plain__echo/execute', { json: { text: 'before' } });
    expect(await first.json()).toMatchObject({ status: 'ok', result: 'echo: before' });
    await plain.forgetSessions(); // as a restarted upstream
    const calls = plain.metas.length;
    const res = await stack.call('/tools/plain__echo/execute', { json: { text: 'after' } });
    expect(await res.json()).toMatchObject({ status: 'ok', result: 'echo: after' });
    expect(plain.metas.length).toBe(calls + 1);
  });

  it('keeps at most `concurrency` calls in flight to an upstream; the rest wait their turn', async () => {
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        stack
          .call('/tools/narrow__slow/execute', { json: { text: `n${i}`, ms: 300 } })
          .then((r) => r.json() as Promise<{ status: string }>),
      ),
    );
    expect(answers.every((a) => a.status === 'ok')).toBe(true);
    expect(narrow.maxInFlight).toBe(2);
  });

  it('caps a hostile tools/list and leaves out an oversized definition', async () => {
    const hugeNames = (await names('/tools')).filter((n) => n.startsWith('huge__'));
    expect(hugeNames.length).toBe(500);
    expect(hugeNames).not.toContain('huge__huge');
    // What was left out, and why, is on the admin's report (not only in the log).
    const report = (await (await stack.call('/v1/upstreams', { key: KEYS.admin })).json()) as {
      id: string;
      leftOut: { count: number; problems: string[] };
    }[];
    const huge = report.find((u) => u.id === 'huge')!;
    expect(huge.leftOut.count).toBeGreaterThanOrEqual(201); // 701 listed, 500 served
    expect(huge.leftOut.problems.some((p) => p.includes('more than 500 tools'))).toBe(true);
    expect(huge.leftOut.problems.length).toBeLessThanOrEqual(20);
    // A name a local tool has: left out, and said so.
    const test = report.find((u) => u.id === 'test')!;
    expect(test.leftOut.count).toBe(1);
    expect(test.leftOut.problems[0]).toContain(
      '"test__fail", the name of a tool toolgate already has',
    );
    expect(report.find((u) => u.id === 'everything')!.leftOut).toEqual({ count: 0, problems: [] });
  });

  it('reads the list again at once on notifications/tools/list_changed', async () => {
    expect(await names('/tools')).not.toContain('test__added');
    upstream.addTool('added');
    // refreshSeconds is 60: only the notification can bring it in this soon
    const after = await until(
      () => names('/tools'),
      (n) => n.includes('test__added'),
      8000,
    );
    expect(after).toContain('test__added');
  });

  it('sends progress and log notifications as live events, and a cancel to the upstream', async () => {
    const started = await stack.call('/tools/test__slow/execute?wait=false', {
      json: { text: 'cancel-me', ms: 30_000 },
    });
    expect(started.status).toBe(202);
    const { id } = (await started.json()) as { id: string };
    const events = await stack.call(`/v1/calls/${id}/events`);
    const seen: { event: string; data: string }[] = [];
    const reader = (async () => {
      const decoder = new TextDecoder();
      let buffer = '';
      for await (const chunk of events.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true });
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1] ?? '';
          if (event) seen.push({ event, data });
        }
      }
    })();
    await until(
      () => seen,
      (s) => s.some((e) => e.event === 'progress') && s.some((e) => e.event === 'output'),
      8000,
    );
    expect(seen.find((e) => e.event === 'progress')?.data).toContain('started');
    expect(seen.find((e) => e.event === 'output')?.data).toContain('working on cancel-me');

    const cancelled = await stack.call(`/v1/calls/${id}/cancel`, { method: 'POST' });
    expect(cancelled.status).toBe(200);
    await until(
      () => upstream.cancelled,
      (c) => c.includes('cancel-me'),
      5000,
    );
    expect(upstream.cancelled).toContain('cancel-me');
    expect(upstream.notifications).toContain('notifications/cancelled');
    await reader;
    expect(seen.at(-1)?.event).toBe('outcome');
  });

  it('bounds a flood of 20,000 log notifications: the call answers, its output capped', async () => {
    // (How fast the gateway answers meanwhile is the stdio test's: this upstream runs in the
    // test's own process, so its sending would be measured too.)
    const started = await stack.call('/tools/test__chatty/execute?wait=false', { json: {} });
    const { id } = (await started.json()) as { id: string };
    const text = await (await stack.call(`/v1/calls/${id}/events`)).text();
    expect(text).toContain('chatted');
    const output = text
      .split('\n\n')
      .filter((block) => /^event: output$/m.test(block))
      .map((block) => (JSON.parse(/^data: (.*)$/m.exec(block)![1]!) as { text: string }).text)
      .join('');
    // calls.events.maxOutputBytes (64 KiB) and its closing note, whatever the upstream sends.
    expect(Buffer.byteLength(output)).toBeLessThan(65_536 + 200);
    expect(output).toContain('chatty line 0');
  });

  it('answers upstream_unavailable within timeoutMs when the upstream does not answer', async () => {
    const t0 = Date.now();
    const res = await stack.call('/tools/leaving__slow/execute', {
      json: { text: 'too-slow', ms: 20_000 },
    });
    const body = (await res.json()) as { status: string; error: { code: string; message: string } };
    expect(body.error.code).toBe('upstream_unavailable');
    expect(body.error.message).toContain('2000 ms');
    expect(Date.now() - t0).toBeLessThan(2000 + 2500);
    // the upstream is told to stop
    await until(
      () => leaving.cancelled,
      (c) => c.includes('too-slow'),
      3000,
    );
    expect(leaving.cancelled).toContain('too-slow');
  });

  it('answers upstream_unavailable within timeoutMs when the upstream is gone, and stays ready', async () => {
    expect((await names('/tools')).filter((n) => n.startsWith('leaving__')).length).toBeGreaterThan(
      0,
    );
    await leaving.close();
    const t0 = Date.now();
    const res = await stack.call('/tools/leaving__echo/execute', { json: { text: 'anyone?' } });
    const body = (await res.json()) as { status: string; error: { code: string } };
    expect(body.error.code).toBe('upstream_unavailable');
    expect(Date.now() - t0).toBeLessThan(2000 + 2500);

    const ready = await until(
      async () => (await (await fetch(`${stack.url}/readyz`)).json()) as Record<string, unknown>,
      (r) => (r.upstreams as Record<string, string> | undefined)?.leaving === 'down',
      5000,
    );
    expect(ready).toMatchObject({
      status: 'ready',
      upstreams: { everything: 'up', test: 'up', leaving: 'down', gone: 'down' },
    });
    expect((await fetch(`${stack.url}/readyz`)).status).toBe(200);
  });
});

describe('upstreams behind the SSRF guard', () => {
  it('never reaches an upstream whose address policy.http does not allow', async () => {
    const upstream = await startTestUpstream();
    const stack = await startStack({
      config: { upstreams: [{ id: 'local', url: upstream.url, timeoutMs: 1000, trust: 'auto' }] },
    });
    try {
      const ready = (await (await fetch(`${stack.url}/readyz`)).json()) as Record<string, unknown>;
      expect(ready).toMatchObject({ status: 'ready', upstreams: { local: 'down' } });
      const names = ((await (await stack.call('/tools')).json()) as { name: string }[]).map(
        (t) => t.name,
      );
      expect(names.some((n) => n.startsWith('local__'))).toBe(false);
      expect(upstream.metas.length + upstream.notifications.length).toBe(0);
    } finally {
      await stack.close();
      await upstream.close();
    }
  });
});

describe('upstreams: config errors', () => {
  it('takes one transport per upstream, and checks a stdio server against the config', () => {
    const npm = '@modelcontextprotocol/server-filesystem@2026.8.31';
    expect(
      parseConfig({ upstreams: [{ id: 'fs', npm, args: ['/workspace'] }] }).upstreams[0],
    ).toMatchObject({
      npm,
      image: 'node',
      start: 'lazy',
      idleSeconds: 300,
    });
    const doc = { upstreams: [{ id: 'fs', command: ['x'], url: 'https://a.example/mcp' }] };
    expect(() => parseConfig(doc)).toThrow(ConfigError);
    expect(checkConfig(doc).problems).toEqual([
      {
        path: '/upstreams/0/command',
        message: 'upstream "fs" has url and command: give one transport',
      },
    ]);
    expect(
      checkConfig({
        upstreams: [
          { id: 'a', command: ['x'], image: 'ruby', workspace: 'nobody', args: ['y'] },
          { id: 'b', npm: 'left-pad' },
          { id: 'c' },
        ],
      }).problems,
    ).toEqual([
      { path: '/upstreams/1/npm', message: expect.stringContaining('must match pattern') },
    ]);
    expect(
      checkConfig({
        upstreams: [
          { id: 'a', command: ['x'], image: 'ruby', workspace: 'nobody', args: ['y'] },
          { id: 'c' },
        ],
      }).problems.map((p) => p.path),
    ).toEqual([
      '/upstreams/0/image',
      '/upstreams/0/workspace',
      '/upstreams/0/args',
      '/upstreams/1/url',
    ]);
  });

  it('names a header variable that is not set, and resolves one that is', () => {
    const doc = {
      upstreams: [
        {
          id: 'gh',
          url: 'https://mcp.example/mcp',
          headers: { authorization: 'Bearer ${GH_TOKEN}' },
        },
      ],
    };
    expect(() => parseConfig(doc, {})).toThrow(/GH_TOKEN is not set/);
    expect(checkConfig(doc, {}).problems[0]).toMatchObject({
      path: '/upstreams/0/headers/authorization',
      message: 'environment variable GH_TOKEN is not set',
    });
    expect(parseConfig(doc, { GH_TOKEN: 'abc' }).upstreams[0]?.headers).toEqual({
      authorization: 'Bearer abc',
    });
  });

  it('reports two tools that become one name, naming both, and duplicate ids', () => {
    const doc = {
      upstreams: [
        { id: 'gh', url: 'https://a.example/mcp', tools: ['issue.create', 'issue_create'] },
        { id: 'gh', url: 'https://b.example/mcp' },
      ],
    };
    const { problems } = checkConfig(doc);
    expect(problems).toEqual(
      expect.arrayContaining([
        {
          path: '/upstreams/0/tools',
          message:
            '"gh" tool "issue_create" and "gh" tool "issue.create" both become the tool name "gh__issue_create"',
        },
        { path: '/upstreams/1/id', message: 'duplicate upstream id "gh"' },
      ]),
    );
    expect(() => parseConfig(doc)).toThrow(/both become the tool name "gh__issue_create"/);
  });

  it('toolgate config check lists every upstream problem', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'toolgate-upstreams-'));
    try {
      const file = path.join(dir, 'upstreams.json');
      await writeFile(
        file,
        JSON.stringify({
          upstreams: [
            { id: 'fs', command: ['mcp-server-filesystem'], image: 'ruby' },
            { id: 'gh', url: 'https://a.example/mcp', headers: { 'x-token': '${NO_SUCH_TOKEN}' } },
            { id: 'dup', url: 'https://b.example/mcp', tools: ['a.b', 'a_b'] },
          ],
        }),
      );
      const run = await new Promise<{ code: number; stderr: string }>((resolve) => {
        execFile(
          process.execPath,
          [TOOLGATE_BIN, 'config', 'check', file],
          { cwd: ROOT, env: { PATH: process.env.PATH ?? '', HOME: dir }, timeout: 60_000 },
          (err, _stdout, stderr) =>
            resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr }),
        );
      });
      expect(run.code).toBe(1);
      const lines = run.stderr.split('\n').map((l) => l.trim());
      expect(lines).toEqual(
        expect.arrayContaining([
          '/upstreams/0/image: no sandbox image "ruby" (sandbox.images: python, shell, node)',
          '/upstreams/1/headers/x-token: environment variable NO_SUCH_TOKEN is not set',
          '/upstreams/2/tools: "dup" tool "a_b" and "dup" tool "a.b" both become the tool name "dup__a_b"',
        ]),
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('takes the defaults', () => {
    const config = parseConfig({ upstreams: [{ id: 'a', url: 'http://127.0.0.1:1/mcp' }] });
    expect(config.upstreams[0]).toMatchObject({
      refreshSeconds: 60,
      timeoutMs: 30_000,
      concurrency: 16,
      cacheTtlSeconds: 0,
      trust: 'pin',
      approval: [],
      headers: {},
    });
  });
});
