/**
 * POST /mcp with the official SDK's Client over real HTTP, against a real gateway and worker:
 * listings per client scope, calls through the pipeline, errors the model can read.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

let stack: Stack;
const open: Client[] = [];

beforeAll(async () => {
  stack = await startStack({ tools: testTools });
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
    const body = (await res.json()) as { id: number; result: { tools: unknown[] } };
    expect(body.id).toBe(7);
    expect(body.result.tools.length).toBeGreaterThan(3);
    expect((await stack.call('/mcp')).status).toBe(405);
  });
});
