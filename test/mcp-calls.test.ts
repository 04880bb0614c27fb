/**
 * Long MCP tool calls through a real gateway, worker and docker sandbox: progress and output
 * notifications while the call runs (keep-alive progress included), the logging level of
 * 2025-era clients kept for every replica, and cancellation from the MCP side — a 2025-era
 * `notifications/cancelled` (even on another replica) and a 2026-07-28 client closing its
 * stream — ending the sandboxed call `cancelled`. The live output comes from `ticker`, a tool
 * that reports through ToolContext.events as a sandboxed tool's output does.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  LOG_LEVEL_META_KEY,
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernTransport,
} from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CancelTaskResultSchema,
  CreateTaskResultSchema,
  ErrorCode,
  GetTaskResultSchema,
  type LoggingMessageNotification,
} from '@modelcontextprotocol/sdk/types.js';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { Type, type AnyToolSpec } from '@toolgate/registry';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

/** Writes "step i" (and "warn i" to stderr when asked) and progress i/steps, one a second. */
const ticker: AnyToolSpec = {
  name: 'ticker',
  description: 'Counts steps, one a second, reporting as it goes',
  category: 'test',
  parameters: Type.Object(
    { steps: Type.Integer({ minimum: 0 }), stderr: Type.Optional(Type.Boolean()) },
    { additionalProperties: false },
  ),
  timeoutMs: 30_000,
  handler: async ({ steps, stderr }: { steps: number; stderr?: boolean }, ctx) => {
    for (let i = 1; i <= steps; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      ctx.events?.output('stdout', `step ${i}\n`);
      if (stderr) ctx.events?.output('stderr', `warn ${i}\n`);
      ctx.events?.progress(i, steps);
    }
    return { steps };
  },
};

const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`mcp-calls: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('MCP long calls (docker sandbox)', () => {
  let stack: Stack;
  /** A second gateway on the same Redis, no worker: another replica behind the balancer. */
  let replica: Stack;
  let sandbox: Sandbox;
  let dir: string;
  const open: { close(): Promise<void> }[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'toolgate-mcp-'));
    sandbox = await createSandbox(testSandboxConfig('docker', dir));
    await sandbox.warmUp(60_000);
    stack = await startStack({
      tools: [...testTools, ticker],
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
    });
    replica = await startStack({
      tools: [...testTools, ticker],
      worker: false,
      config: { redis: { url: inject('redisUrl'), prefix: stack.config.redis.prefix } },
    });
  }, 120_000);
  afterAll(async () => {
    await Promise.all(open.map((c) => c.close()));
    await replica?.close();
    await stack?.close();
    await sandbox?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function legacyClient(on: Stack = stack, key: string = KEYS.alice) {
    const client = new Client({ name: 'toolgate-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${on.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
    open.push(client);
    const logs: { at: number; level: string; data: unknown }[] = [];
    client.setNotificationHandler(
      (await import('@modelcontextprotocol/sdk/types.js')).LoggingMessageNotificationSchema,
      (n: LoggingMessageNotification) => {
        logs.push({ at: Date.now(), level: n.params.level, data: n.params.data });
      },
    );
    return { client, logs };
  }

  const callIdIn = (logs: { data: unknown }[]) =>
    logs
      .map((l) => /^call ([0-9a-f-]{36}) /.exec(String(l.data))?.[1])
      .find((id) => id !== undefined);

  const statusOf = async (id: string) =>
    ((await (await stack.call(`/v1/calls/${id}`)).json()) as { status: string }).status;

  it('a 5 s call sends its output as log messages and its progress while it runs', async () => {
    const { client, logs } = await legacyClient();
    await client.setLoggingLevel('info');
    const progress: { at: number; progress: number; total?: number }[] = [];
    const started = Date.now();
    const result = await client.callTool(
      { name: 'ticker', arguments: { steps: 5 } },
      CallToolResultSchema,
      {
        onprogress: (p) => progress.push({ at: Date.now(), progress: p.progress, total: p.total }),
        timeout: 30_000,
      },
    );
    const ended = Date.now();
    expect(result.isError).toBeFalsy();
    const lines = logs.filter((l) => l.level === 'info').map((l) => String(l.data));
    expect(lines.join('\n')).toMatch(/step 1[\s\S]*step 3[\s\S]*step 5/);
    // Live, not with the answer: the first line came seconds before the end.
    const first = logs.find((l) => String(l.data).includes('step 1'))!;
    expect(ended - first.at).toBeGreaterThan(2500);
    // The tool's own progress, growing, and never 5 s without one.
    expect(progress.filter((p) => p.total === 5).map((p) => p.progress)).toEqual(
      expect.arrayContaining([1, 2, 3, 4, 5]),
    );
    const times = [started, ...progress.map((p) => p.at), ended];
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeLessThan(5000);
    for (let i = 1; i < progress.length; i++) {
      expect(progress[i]!.progress).toBeGreaterThan(progress[i - 1]!.progress);
    }
  }, 60_000);

  it('a sandboxed run_shell streams its stdout and stderr as log messages before it ends', async () => {
    const { client, logs } = await legacyClient();
    await client.setLoggingLevel('info');
    const result = await client.callTool(
      {
        name: 'run_shell',
        arguments: { command: 'for i in 1 2 3 4 5; do echo step $i; sleep 1; done; echo bye >&2' },
      },
      CallToolResultSchema,
      { timeout: 30_000 },
    );
    const ended = Date.now();
    expect(result.isError).toBeFalsy();
    const text = logs.map((l) => `${l.level} ${String(l.data)}`).join('\n');
    expect(text).toMatch(/info step 1[\s\S]*info step 5/);
    expect(text).toContain('warning bye');
    const first = logs.find((l) => String(l.data).includes('step 1'))!;
    expect(ended - first.at).toBeGreaterThan(2500);
  }, 60_000);

  it('keep-alive progress keeps a client with a 3 s timeout (reset on progress) waiting through a silent 9 s call', async () => {
    const { client } = await legacyClient();
    const result = await client.callTool(
      { name: 'run_shell', arguments: { command: 'sleep 9; echo done' } },
      CallToolResultSchema,
      { onprogress: () => undefined, timeout: 3000, resetTimeoutOnProgress: true },
    );
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toMatchObject({ stdout: 'done\n', exitCode: 0 });
  }, 60_000);

  it('a chatty call (a line a second) still sends keep-alive progress: a 4 s timeout reset on progress completes', async () => {
    const { client, logs } = await legacyClient();
    await client.setLoggingLevel('info');
    const progress: { at: number; message?: string }[] = [];
    const started = Date.now();
    const result = await client.callTool(
      {
        name: 'run_shell',
        arguments: { command: 'for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 1; done' },
      },
      CallToolResultSchema,
      {
        onprogress: (p) => progress.push({ at: Date.now(), message: p.message }),
        timeout: 4000,
        resetTimeoutOnProgress: true,
      },
    );
    const ended = Date.now();
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toMatchObject({ exitCode: 0 });
    // The output went out as log messages while it ran…
    const lines = logs.filter((l) => l.level === 'info').map((l) => String(l.data));
    expect(lines).toEqual(expect.arrayContaining(['line 1', 'line 4', 'line 8']));
    // …and did not hold back the keep-alives (the old notifier sent none while lines flowed):
    // one at least every 4 s of the 8 s call (every 2 s as sent), the later ones counting the
    // output seen.
    expect(progress.length).toBeGreaterThanOrEqual(Math.floor((ended - started) / 4000));
    const times = [started, ...progress.map((p) => p.at), ended];
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeLessThan(4000);
    expect(progress.some((p) => /characters of output/.test(p.message ?? ''))).toBe(true);
  }, 60_000);

  it('logging/setLevel sent to one replica filters the log messages of calls on another', async () => {
    const { client: setter } = await legacyClient(replica);
    const { client, logs } = await legacyClient(stack);
    await setter.setLoggingLevel('warning');
    await client.callTool({ name: 'ticker', arguments: { steps: 1, stderr: true } });
    expect(logs.map((l) => [l.level, String(l.data)])).toEqual([['warning', 'warn 1']]);

    logs.length = 0;
    await setter.setLoggingLevel('info');
    await client.callTool({ name: 'ticker', arguments: { steps: 1, stderr: true } });
    expect(logs.map((l) => [l.level, String(l.data)])).toEqual([
      ['info', 'step 1'],
      ['warning', 'warn 1'],
    ]);
  }, 60_000);

  it('notifications/cancelled, even on another replica, ends the sandboxed call cancelled', async () => {
    const { client, logs } = await legacyClient();
    await client.setLoggingLevel('debug');
    const controller = new AbortController();
    const call = client
      .callTool({ name: 'run_shell', arguments: { command: 'sleep 60' } }, CallToolResultSchema, {
        signal: controller.signal,
        timeout: 90_000,
      })
      .catch((err: unknown) => err);
    let id: string | undefined;
    for (let i = 0; i < 100 && !(id && logs.some((l) => /running$/.test(String(l.data)))); i++) {
      await new Promise((r) => setTimeout(r, 100));
      id = callIdIn(logs);
    }
    expect(id).toBeDefined();
    expect(await statusOf(id!)).toBe('running');
    // The SDK client sends notifications/cancelled on its own connection to `stack`.
    controller.abort('the user clicked stop');
    await call;
    let status = '';
    for (let i = 0; i < 50 && status !== 'cancelled'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      status = await statusOf(id!);
    }
    expect(status).toBe('cancelled');

    // A raw 2025-era request, cancelled through the other replica.
    const requestId = `cancel-me-${Date.now()}`;
    const raw = stack.call('/mcp', {
      json: {
        jsonrpc: '2.0',
        id: requestId,
        method: 'tools/call',
        params: { name: 'run_shell', arguments: { command: 'sleep 60' } },
      },
      headers: { accept: 'application/json, text/event-stream' },
    });
    const res = await raw;
    const reader = res.body!.getReader();
    let text = '';
    let second: string | undefined;
    while (!second) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
      if (/running/.test(text)) second = /call ([0-9a-f-]{36}) /.exec(text)?.[1];
    }
    expect(second).toBeDefined();
    const sent = performance.now();
    const cancelled = await replica.call('/mcp', {
      json: { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId } },
      headers: { accept: 'application/json, text/event-stream' },
    });
    expect(cancelled.status).toBe(202);
    expect(await statusOf(second!)).toBe('cancelled');
    console.warn(
      `mcp: notifications/cancelled on a replica → sandboxed call cancelled in ${(performance.now() - sent).toFixed(0)} ms`,
    );
    await reader.cancel();
  }, 60_000);

  it('2025-11-25: tasks/cancel stops a running task; cancelling it again is invalid params', async () => {
    const { client } = await legacyClient();
    const created = await client.request(
      {
        method: 'tools/call',
        params: { name: 'run_shell', arguments: { command: 'sleep 60' }, task: {} },
      },
      CreateTaskResultSchema,
    );
    const { taskId } = created.task;
    expect(created.task.status).toBe('working');
    for (let i = 0; i < 100 && (await statusOf(taskId)) !== 'running'; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const cancelled = await client.request(
      { method: 'tasks/cancel', params: { taskId } },
      CancelTaskResultSchema,
    );
    expect(cancelled).toMatchObject({ taskId, status: 'cancelled' });
    expect(await statusOf(taskId)).toBe('cancelled');
    expect(
      await client.request({ method: 'tasks/get', params: { taskId } }, GetTaskResultSchema),
    ).toMatchObject({ taskId, status: 'cancelled' });
    await expect(
      client.request({ method: 'tasks/cancel', params: { taskId } }, CancelTaskResultSchema),
    ).rejects.toMatchObject({ code: ErrorCode.InvalidParams });
    // Another client's task does not exist for it.
    await expect(
      (await legacyClient(stack, KEYS.bob)).client.request(
        { method: 'tasks/get', params: { taskId } },
        GetTaskResultSchema,
      ),
    ).rejects.toMatchObject({ code: ErrorCode.InvalidParams });
  }, 60_000);

  it('a 2026-07-28 client gets log messages at the level it sends, and closing the stream cancels the call', async () => {
    const client = new ModernClient(
      { name: 'toolgate-test-modern', version: '1.0.0' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    await client.connect(
      new ModernTransport(new URL(`${stack.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${KEYS.alice}` } },
      }),
    );
    open.push(client);
    const logs: string[] = [];
    client.setNotificationHandler('notifications/message', (n) => {
      logs.push(`${n.params.level} ${String(n.params.data)}`);
    });
    // No level sent: no log messages (the 2026-07-28 rule), whatever 2025-era clients set.
    await client.callTool({ name: 'ticker', arguments: { steps: 1 } });
    expect(logs).toEqual([]);
    const debug = { [LOG_LEVEL_META_KEY]: 'debug' };
    await client.callTool({ name: 'ticker', arguments: { steps: 1 }, _meta: debug });
    expect(logs).toContain('info step 1');

    logs.length = 0;
    const controller = new AbortController();
    const call = client
      .callTool(
        { name: 'run_shell', arguments: { command: 'sleep 60' }, _meta: debug },
        { signal: controller.signal, timeout: 90_000 },
      )
      .catch((err: unknown) => err);
    let id: string | undefined;
    for (let i = 0; i < 100 && !(id && logs.some((l) => l.endsWith('running'))); i++) {
      await new Promise((r) => setTimeout(r, 100));
      id = logs.map((l) => /call ([0-9a-f-]{36}) /.exec(l)?.[1]).find(Boolean);
    }
    expect(id).toBeDefined();
    controller.abort();
    await call;
    let status = '';
    for (let i = 0; i < 50 && status !== 'cancelled'; i++) {
      await new Promise((r) => setTimeout(r, 100));
      status = await statusOf(id!);
    }
    expect(status).toBe('cancelled');
  }, 60_000);
});
