/**
 * POST /mcp with the official SDK's Client over real HTTP, against a real gateway and worker:
 * listings per client scope, calls through the pipeline, errors the model can read.
 */
import { request as httpRequest } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  ErrorCode,
  GetTaskResultSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernTransport,
} from '@modelcontextprotocol/client';
import { Type } from '@toolgate/registry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

let stack: Stack;
const open: Client[] = [];

/** A tool that declares its result's schema (MCP outputSchema). */
const forecastTool = {
  name: 'forecast',
  description: 'Tomorrow’s temperature in a city',
  category: 'test',
  parameters: Type.Object({ city: Type.String() }, { additionalProperties: false }),
  result: Type.Object({ city: Type.String(), celsius: Type.Number() }),
  idempotent: true,
  handler: ({ city }: { city: string }) => ({ city, celsius: 4 }),
};

beforeAll(async () => {
  stack = await startStack({
    tools: [...testTools, forecastTool],
    config: {
      server: { port: 0, host: '127.0.0.1', allowedOrigins: ['https://app.example.com'] },
    },
  });
  const probe = await stack.call('/mcp', { json: {} });
  if (probe.status === 404) {
    throw new Error(
      'POST /mcp is not mounted: services/gateway/src/gateway.ts needs app.use(mcpRoutes({ registry, pipeline }))',
    );
  }
});
afterAll(async () => {
  await Promise.all(open.map((c) => c.close()));
  await stack?.close();
});

async function connect(key: string | null = KEYS.alice, headers: Record<string, string> = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
    requestInit: {
      headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    },
  });
  const client = new Client({ name: 'toolgate-test', version: '1.0.0' });
  await client.connect(transport);
  open.push(client);
  return client;
}

/** The text content of a tools/call result (callTool's type also covers the old toolResult form). */
const text = (result: unknown) =>
  (result as { content: { type: string; text: string }[] }).content.map((c) => c.text).join('');

describe('MCP over Streamable HTTP', () => {
  it('initializes statelessly and names the server', async () => {
    const client = await connect();
    expect(client.getServerVersion()).toMatchObject({ name: 'toolgate' });
    expect(client.getServerCapabilities()?.tools).toBeDefined();
    expect(client.getInstructions()).toContain('toolgate');
  });

  it("tools/list holds exactly the client's tools, with their JSON Schemas", async () => {
    const all = await (await connect()).listTools();
    const calculator = all.tools.find((t) => t.name === 'calculator');
    expect(calculator).toMatchObject({
      description: expect.any(String),
      inputSchema: {
        type: 'object',
        properties: { expression: expect.any(Object) },
        required: ['expression'],
        additionalProperties: false,
      },
    });
    expect(all.tools.find((t) => t.name === 'wipe_disk')?.annotations).toMatchObject({
      destructiveHint: true,
    });
    const http = await stack.call('/tools');
    const names = ((await http.json()) as { name: string }[]).map((t) => t.name);
    expect(all.tools.map((t) => t.name).sort()).toEqual(names.sort());

    const bob = await (await connect(KEYS.bob)).listTools();
    const bobHttp = (await (await stack.call('/tools', { key: KEYS.bob })).json()) as {
      name: string;
    }[];
    expect(bob.tools.map((t) => t.name).sort()).toEqual(bobHttp.map((t) => t.name).sort());
    expect(bob.tools.map((t) => t.name)).toContain('calculator');
    expect(bob.tools.map((t) => t.name)).not.toContain('wipe_disk');
  });

  it('tools/call runs the tool through the queue and the worker', async () => {
    const client = await connect();
    const result = await client.callTool({
      name: 'calculator',
      arguments: { expression: '2*(3+4)' },
    });
    expect(result.isError).toBeFalsy();
    expect(text(result)).toBe('14');
    expect(result._meta?.['toolgate/call']).toMatchObject({ status: 'ok', cached: false });

    const time = await client.callTool({ name: 'current_time', arguments: { timezone: 'UTC' } });
    expect(time.structuredContent).toMatchObject({ timezone: 'UTC' });
    expect(JSON.parse(text(time))).toEqual(time.structuredContent);
  });

  it('a failing tool is an isError result the model can read; the worker lives on', async () => {
    const client = await connect();
    const failed = await client.callTool({ name: 'explode', arguments: { how: 'tool_error' } });
    expect(failed.isError).toBe(true);
    expect(JSON.parse(text(failed))).toEqual({
      error: {
        code: 'upstream_down',
        message: 'the upstream service is down',
        details: { retryInSeconds: 5 },
      },
    });
    const timeout = await client.callTool({ name: 'sleep', arguments: { ms: 10_000 } });
    expect(timeout.isError).toBe(true);
    expect(text(timeout)).toContain('"code":"timeout"');
    const next = await client.callTool({ name: 'calculator', arguments: { expression: '1+1' } });
    expect(text(next)).toBe('2');
  });

  it('invalid arguments come back as isError with the validator’s findings', async () => {
    const client = await connect();
    const result = await client.callTool({ name: 'calculator', arguments: { expr: '1' } });
    expect(result.isError).toBe(true);
    const { error } = JSON.parse(text(result)) as { error: { code: string; details: unknown[] } };
    expect(error.code).toBe('invalid_arguments');
    expect(error.details).toEqual(
      expect.arrayContaining([expect.objectContaining({ keyword: 'additionalProperties' })]),
    );
  });

  it('unknown and forbidden tools are JSON-RPC invalid-params errors', async () => {
    await expect((await connect()).callTool({ name: 'no_such_tool' })).rejects.toMatchObject({
      code: ErrorCode.InvalidParams,
      message: expect.stringContaining('no tool named "no_such_tool"'),
    });
    const bob = await connect(KEYS.bob);
    const err = await bob.callTool({ name: 'wipe_disk', arguments: { disk: 'sda' } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(McpError);
    expect(err).toMatchObject({
      code: ErrorCode.InvalidParams,
      message: expect.stringContaining('may not call'),
    });
  });

  it('a call that needs approval answers "awaiting approval", and an admin sees it pending', async () => {
    const client = await connect();
    const result = await client.callTool({ name: 'wipe_disk', arguments: { disk: 'sdb' } });
    expect(result.isError).toBeFalsy();
    const body = JSON.parse(text(result)) as { id: string; status: string; message: string };
    expect(body).toMatchObject({
      status: 'pending_approval',
      message: expect.stringContaining('awaiting approval'),
    });
    const call = await stack.call(`/v1/calls/${body.id}`, { key: KEYS.admin });
    expect(((await call.json()) as { status: string }).status).toBe('pending_approval');
  });

  it('passes X-Conversation-Id to the loop guard', async () => {
    const client = await connect(KEYS.alice, { 'x-conversation-id': `mcp-${Date.now()}` });
    const limit = stack.config.policy.loopGuard.maxCalls;
    let last;
    for (let i = 0; i <= limit; i++) {
      last = await client.callTool({ name: 'calculator', arguments: { expression: String(i) } });
    }
    expect(last?.isError).toBe(true);
    expect(text(last!)).toContain('loop_limit');
  });

  it('refuses clients without a valid key', async () => {
    await expect(connect(null)).rejects.toThrow();
    const res = await stack.call('/mcp', {
      key: 'wrong-key-0123456789abcdef',
      json: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    });
    expect(res.status).toBe(401);
  });

  it('plain JSON-RPC over HTTP works without a session; GET is 405', async () => {
    const res = await stack.call('/mcp', {
      json: { jsonrpc: '2.0', id: 7, method: 'tools/list', params: {} },
      headers: { accept: 'application/json, text/event-stream' },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('mcp-session-id')).toBeNull();
    const body = (await rpcBody(res)) as { id: number; result: { tools: unknown[] } };
    expect(body.id).toBe(7);
    expect(body.result.tools.length).toBeGreaterThan(3);
    expect((await stack.call('/mcp')).status).toBe(405);
  });
});

/** A JSON-RPC answer, whether it came as a JSON body or as one SSE `message` event. */
async function rpcBody(res: Response): Promise<unknown> {
  const raw = await res.text();
  if (!(res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    return JSON.parse(raw);
  }
  const data = raw
    .split('\n')
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(5).trim())
    .filter((l) => l.startsWith('{'));
  return JSON.parse(data.at(-1)!);
}

const initialize = (protocolVersion: string, headers: Record<string, string> = {}) =>
  stack.call('/mcp', {
    json: {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    },
    headers: { accept: 'application/json, text/event-stream', ...headers },
  });

describe('MCP protocol revisions', () => {
  it('a 2025-06-18 client gets 2025-06-18, a v1 SDK client 2025-11-25', async () => {
    const res = await initialize('2025-06-18');
    expect(res.status).toBe(200);
    expect(await rpcBody(res)).toMatchObject({
      result: { protocolVersion: '2025-06-18', serverInfo: { name: 'toolgate' } },
    });
    const client = await connect();
    expect((client.transport as StreamableHTTPClientTransport).protocolVersion).toBe('2025-11-25');
  });

  it('a 2026-07-28 client (SDK v2, pinned) lists and calls tools without initialize', async () => {
    const client = new ModernClient(
      { name: 'toolgate-test-modern', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    await client.connect(
      new ModernTransport(new URL(`${stack.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${KEYS.alice}` } },
      }),
    );
    try {
      expect(client.getProtocolEra()).toBe('modern');
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toContain('calculator');
      const result = await client.callTool({
        name: 'calculator',
        arguments: { expression: '6*7' },
      });
      expect(text(result)).toBe('42');
    } finally {
      await client.close();
    }
  });
});

describe('MCP tool listings', () => {
  it('annotations follow the registry: read-only, destructive (needs approval), idempotent, open world, title', async () => {
    const { tools } = await (await connect()).listTools();
    const byName = new Map(tools.map((t) => [t.name, t]));
    expect(byName.get('calculator')).toMatchObject({
      title: 'Calculator',
      annotations: {
        title: 'Calculator',
        readOnlyHint: true,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
    });
    expect(byName.get('wipe_disk')?.annotations).toMatchObject({
      title: 'Wipe disk',
      readOnlyHint: false,
      destructiveHint: true,
    });
    expect(byName.get('http_get')?.annotations).toMatchObject({
      readOnlyHint: true,
      openWorldHint: true,
    });
    expect(byName.get('http_post')?.annotations).toMatchObject({
      readOnlyHint: false,
      idempotentHint: false,
      openWorldHint: true,
    });
  });

  it('a tool with a result schema has an outputSchema, and its calls a matching structuredContent', async () => {
    const client = await connect();
    const { tools } = await client.listTools();
    const forecast = tools.find((t) => t.name === 'forecast');
    expect(forecast?.outputSchema).toMatchObject({
      type: 'object',
      required: ['city', 'celsius'],
    });
    // The v1 SDK client checks structuredContent against the outputSchema it listed.
    const result = await client.callTool({ name: 'forecast', arguments: { city: 'Oslo' } });
    expect(result.structuredContent).toEqual({ city: 'Oslo', celsius: 4 });
    expect(JSON.parse(text(result))).toEqual(result.structuredContent);
    // The built-ins declare theirs.
    for (const name of ['current_time', 'http_get', 'run_python', 'file_read', 'find_tools']) {
      expect(tools.find((t) => t.name === name)?.outputSchema, name).toMatchObject({
        type: 'object',
      });
    }
    const time = await client.callTool({ name: 'current_time', arguments: { timezone: 'UTC' } });
    expect(time.structuredContent).toMatchObject({ timezone: 'UTC' });
  });

  it('calculator, whose result is a bare number, answers it structured as {"result": …}', async () => {
    const client = await connect();
    const { tools } = await client.listTools();
    expect(tools.find((t) => t.name === 'calculator')?.outputSchema).toEqual({
      type: 'object',
      properties: { result: { type: 'number', description: expect.any(String) } },
      required: ['result'],
      additionalProperties: false,
    });
    // The v1 SDK client checks structuredContent against that schema: a mismatch would throw.
    const result = await client.callTool({
      name: 'calculator',
      arguments: { expression: '2*(3+4)' },
    });
    expect(result.structuredContent).toEqual({ result: 14 });
    expect(text(result)).toBe('14');
    // The same through a 2025-11-25 task (tasks/result answers from the call record).
    const created = await client.request(
      {
        method: 'tools/call',
        params: { name: 'calculator', arguments: { expression: '6*7' }, task: {} },
      },
      CreateTaskResultSchema,
    );
    const viaTask = await client.request(
      { method: 'tasks/result', params: { taskId: created.task.taskId } },
      CallToolResultSchema,
    );
    expect(viaTask.structuredContent).toEqual({ result: 42 });
    // REST and the dialects keep the bare number.
    const rest = await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } });
    expect(await rest.json()).toMatchObject({ status: 'ok', result: 2 });
    // An error is no result: no structured content.
    const failed = await client.callTool({ name: 'calculator', arguments: { expression: '1/0' } });
    expect(failed.isError).toBe(true);
    expect(failed.structuredContent).toBeUndefined();
  });
});

describe('MCP Origin and Host checks', () => {
  it('refuses a page from an origin not in server.allowedOrigins with 403 and a JSON-RPC error', async () => {
    const res = await initialize('2025-11-25', { origin: 'http://evil.example.com' });
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({
      jsonrpc: '2.0',
      id: null,
      error: { code: expect.any(Number), message: expect.stringContaining('evil.example.com') },
    });
    const allowed = await initialize('2025-11-25', { origin: 'https://app.example.com' });
    expect(allowed.status).toBe(200);
    const wrongPort = await initialize('2025-11-25', { origin: 'https://app.example.com:8443' });
    expect(wrongPort.status).toBe(403);
    // Clients outside a browser send no Origin: they pass.
    expect((await initialize('2025-11-25')).status).toBe(200);
  });

  it('in development mode only localhost pages and loopback Host names get in', async () => {
    const dev = await startStack({
      tools: testTools,
      worker: false,
      config: { clients: [], server: { port: 0, host: '127.0.0.1' } },
    });
    try {
      const post = (headers: Record<string, string>) =>
        dev.call('/mcp', {
          key: dev.gateway.dev!.key,
          json: { jsonrpc: '2.0', id: 1, method: 'ping' },
          headers: { accept: 'application/json, text/event-stream', ...headers },
        });
      expect((await post({ origin: 'http://localhost:5173' })).status).toBe(200);
      expect((await post({ origin: 'http://[::1]:3000' })).status).toBe(200);
      expect((await post({})).status).toBe(200);
      expect((await post({ origin: 'http://evil.example.com' })).status).toBe(403);
      // DNS rebinding: the page's own name in Host, even with no Origin (fetch cannot set Host).
      const status = (host: string) =>
        new Promise<number | undefined>((resolve, reject) => {
          const url = new URL(`${dev.url}/mcp`);
          const req = httpRequest(
            {
              hostname: url.hostname,
              port: url.port,
              path: url.pathname,
              method: 'POST',
              headers: {
                host,
                authorization: `Bearer ${dev.gateway.dev!.key}`,
                'content-type': 'application/json',
                accept: 'application/json, text/event-stream',
              },
            },
            (res) => {
              res.resume();
              resolve(res.statusCode);
            },
          );
          req.on('error', reject);
          req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }));
        });
      expect(await status('evil.example.com')).toBe(403);
      expect(await status('evil.example.com:8080')).toBe(403);
      expect(await status(`localhost:${new URL(dev.url).port}`)).toBe(200);
    } finally {
      await dev.close();
    }
  });
});

describe('MCP tasks', () => {
  const approve = (id: string) =>
    stack.call(`/v1/approvals/${id}/approve`, { key: KEYS.admin, json: {} });

  it('2025-11-25: a task-augmented call that needs approval is polled to its result after an admin approves', async () => {
    const client = await connect();
    expect(client.getServerCapabilities()?.tasks).toMatchObject({
      cancel: {},
      requests: { tools: { call: {} } },
    });
    const { tools } = await client.listTools();
    expect(tools.find((t) => t.name === 'wipe_disk')?.execution).toEqual({
      taskSupport: 'optional',
    });

    const created = await client.request(
      {
        method: 'tools/call',
        params: { name: 'wipe_disk', arguments: { disk: 'sdc' }, task: { ttl: 60_000 } },
      },
      CreateTaskResultSchema,
    );
    const { taskId } = created.task;
    expect(created.task).toMatchObject({
      status: 'working',
      statusMessage: expect.stringContaining('approve'),
      pollInterval: expect.any(Number),
    });
    // The task is the call: an admin sees it pending.
    const call = await stack.call(`/v1/calls/${taskId}`, { key: KEYS.admin });
    expect(((await call.json()) as { status: string }).status).toBe('pending_approval');

    const get = () =>
      client.request({ method: 'tasks/get', params: { taskId } }, GetTaskResultSchema);
    expect((await get()).status).toBe('working');
    // tasks/result blocks until the call has ended; the approval ends the wait.
    const result = client.request(
      { method: 'tasks/result', params: { taskId } },
      CallToolResultSchema,
    );
    await new Promise((r) => setTimeout(r, 200));
    expect((await approve(taskId)).status).toBe(200);
    const done = await result;
    expect(text(done)).toBe('wiped sdc');
    expect(done._meta?.['io.modelcontextprotocol/related-task']).toEqual({ taskId });
    expect(await get()).toMatchObject({ taskId, status: 'completed' });
  });

  it('2026-07-28: a call that needs approval is a task for a client that takes tasks, polled until the result is in it', async () => {
    const envelope = (extensions: Record<string, unknown> = {}) => ({
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientInfo': { name: 'raw-modern', version: '1' },
      'io.modelcontextprotocol/clientCapabilities': { extensions },
    });
    const rpc = async (method: string, params: Record<string, unknown>) => {
      const res = await stack.call('/mcp', {
        json: { jsonrpc: '2.0', id: 1, method, params },
        headers: {
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2026-07-28',
          'mcp-method': method,
          ...(typeof params['name'] === 'string' ? { 'mcp-name': params['name'] } : {}),
          ...(typeof params['taskId'] === 'string' ? { 'mcp-name': params['taskId'] } : {}),
        },
      });
      return (await rpcBody(res)) as { result: Record<string, unknown> };
    };
    const withTasks = envelope({ 'io.modelcontextprotocol/tasks': {} });
    const created = await rpc('tools/call', {
      name: 'wipe_disk',
      arguments: { disk: 'sdd' },
      _meta: withTasks,
    });
    expect(created.result).toMatchObject({
      resultType: 'task',
      status: 'working',
      ttlMs: stack.config.calls.ttlSeconds * 1000,
      pollIntervalMs: expect.any(Number),
    });
    const taskId = created.result['taskId'] as string;
    expect((await rpc('tasks/get', { taskId, _meta: withTasks })).result).toMatchObject({
      resultType: 'complete',
      status: 'working',
    });
    await approve(taskId);
    let task: Record<string, unknown> = {};
    for (let i = 0; i < 50 && task['status'] !== 'completed'; i++) {
      await new Promise((r) => setTimeout(r, 50));
      task = (await rpc('tasks/get', { taskId, _meta: withTasks })).result;
    }
    expect(task).toMatchObject({
      status: 'completed',
      result: { content: [{ type: 'text', text: 'wiped sdd' }] },
    });
    expect((await rpc('tasks/cancel', { taskId, _meta: withTasks })).result).toEqual({
      resultType: 'complete',
    });

    // A client without the extension gets the answer of today: awaiting approval, no task.
    const plain = await rpc('tools/call', {
      name: 'wipe_disk',
      arguments: { disk: 'sde' },
      _meta: envelope(),
    });
    expect(plain.result['resultType']).not.toBe('task');
    expect(JSON.stringify(plain.result)).toContain('pending_approval');
  });
});
