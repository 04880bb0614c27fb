import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGateway, type Gateway } from '@toolgate/gateway';
import { createLogger } from '@toolgate/log';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { createToolRegistry } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

// Cancellation and live events through the whole path: gateway → Redis → worker → sandbox.
const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`cancel-events: skipped, ${reason}`);

/** Host processes whose command line contains `marker` (a sandbox's processes are host processes). */
function processesWith(marker: string): number {
  let found = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').includes(marker))
        found++;
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

function containersOf(owner: string): number {
  const out = execFileSync('docker', ['ps', '-aq', '--filter', `label=toolgate.owner=${owner}`], {
    encoding: 'utf8',
  });
  return out.split('\n').filter(Boolean).length;
}

async function until<T>(what: () => Promise<T> | T, ok: (v: T) => boolean, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await what();
    if (ok(value) || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface SseEvent {
  event: string;
  id?: string;
  data: Record<string, unknown>;
  at: number;
}

/** Reads an SSE response to its end, stamping each event with its arrival time. */
async function readEvents(res: Response, onEvent?: (e: SseEvent) => void): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields: Record<string, string> = {};
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const at = line.indexOf(': ');
        if (at > 0) fields[line.slice(0, at)] = line.slice(at + 2);
      }
      if (!fields.event) continue;
      const event: SseEvent = {
        event: fields.event,
        data: JSON.parse(fields.data ?? '{}') as Record<string, unknown>,
        at: performance.now(),
        ...(fields.id ? { id: fields.id } : {}),
      };
      events.push(event);
      onEvent?.(event);
    }
  }
  return events;
}

describe.skipIf(reason !== undefined)('cancellation and live events (docker)', () => {
  let stack: Stack;
  let second: Gateway;
  let secondUrl: string;
  let sandbox: Sandbox;
  let dir: string;
  const owner = `cancel-test-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'toolgate-cancel-'));
    // No warm pool: every container here belongs to a call, so any left over is a leak.
    sandbox = await createSandbox(testSandboxConfig('docker', dir, { pool: { size: 0 } }), {
      ownerId: owner,
    });
    await sandbox.start();
    stack = await startStack({
      tools: testTools,
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
      config: {
        clients: [
          {
            id: 'alice',
            key: KEYS.alice,
            tools: ['*'],
            rateLimit: { perMinute: 10_000 },
            limits: { sandboxInFlight: 1 },
          },
          { id: 'bob', key: KEYS.bob, tools: ['*'], rateLimit: { perMinute: 10_000 } },
          {
            id: 'ops',
            key: KEYS.admin,
            tools: ['*'],
            admin: true,
            rateLimit: { perMinute: 10_000 },
          },
        ],
      },
    });
    // A second replica on the same Redis: events and cancels must not depend on which one.
    second = createGateway({
      config: stack.config,
      registry: createToolRegistry(testTools),
      logger: createLogger('test', { level: 'silent' }),
    });
    secondUrl = `http://127.0.0.1:${(await second.listen(0, '127.0.0.1')).port}`;
  }, 120_000);

  afterAll(async () => {
    await second?.close();
    await stack?.close();
    await sandbox?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const start = async (tool: string, args: unknown, key: string = KEYS.alice) => {
    const res = await stack.call(`/tools/${tool}/execute?wait=false`, { json: args, key });
    expect(res.status).toBe(202);
    return ((await res.json()) as { id: string }).id;
  };
  const status = async (id: string, key: string = KEYS.alice) =>
    ((await (await stack.call(`/v1/calls/${id}`, { key })).json()) as { status: string }).status;
  const cancel = (id: string, key: string = KEYS.alice, base = stack.url) =>
    fetch(`${base}/v1/calls/${id}/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
    });

  it('cancels a running `sleep`: answered cancelled, and no process or container of it is left 2 s later', async () => {
    const marker = `sleep 60.${Math.floor(Math.random() * 1e6)}`;
    const id = await start('run_shell', { command: marker });
    await until(
      () => processesWith(marker),
      (n) => n > 0,
    );
    expect(processesWith(marker)).toBeGreaterThan(0);
    expect(await status(id)).toBe('running');

    const asked = performance.now();
    // Through the other replica: the worker hears it through Redis.
    const res = await cancel(id, KEYS.alice, secondUrl);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      id,
      status: 'cancelled',
      cancelledBy: 'alice',
      error: { code: 'cancelled' },
    });
    const processGone = await until(
      () => processesWith(marker),
      (n) => n === 0,
      2000,
    );
    const processMs = performance.now() - asked;
    const containersLeft = await until(
      () => containersOf(owner),
      (n) => n === 0,
      2000,
    );
    const goneMs = performance.now() - asked;
    console.warn(
      `cancel → no process: ${processMs.toFixed(0)} ms, no container: ${goneMs.toFixed(0)} ms`,
    );
    expect(processGone).toBe(0);
    expect(containersLeft).toBe(0);
    expect(goneMs).toBeLessThan(2000);
    expect(await status(id)).toBe('cancelled');
    // The audit log and the stats say so too (a sandbox call's stats within a second).
    type Report = {
      tools: { tool: string; cancelled: number }[];
      recent: { id: string; status: string }[];
    };
    const stats = await until(
      async () => (await (await stack.call('/v1/stats')).json()) as Report,
      (r) =>
        r.recent.some((c) => c.id === id) &&
        (r.tools.find((t) => t.tool === 'run_shell')?.cancelled ?? 0) > 0,
      3000,
    );
    expect(stats.tools.find((t) => t.tool === 'run_shell')?.cancelled).toBeGreaterThanOrEqual(1);
    expect(stats.recent.find((c) => c.id === id)?.status).toBe('cancelled');
  }, 30_000);

  it('a queued call that is cancelled never runs', async () => {
    // alice runs one sandbox call at a time: the second waits in the queue.
    const first = await start('run_shell', { command: 'sleep 3' });
    await until(
      () => status(first),
      (s) => s === 'running',
    );
    const queued = await start('run_shell', { command: 'echo ran > ran.txt' });
    expect(await status(queued)).toBe('queued');
    const res = await cancel(queued);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'cancelled', error: { code: 'cancelled' } });
    await until(
      () => status(first),
      (s) => s === 'ok',
      15_000,
    );
    expect(await status(first)).toBe('ok');
    // Its command never ran: the file it would have written is not there.
    const listed = (await (
      await stack.call('/tools/file_list/execute', { json: { path: '.' } })
    ).json()) as { result: { entries: { name: string }[] } };
    expect(listed.result.entries.map((e) => e.name)).not.toContain('ran.txt');
    expect(await status(queued)).toBe('cancelled');
  }, 30_000);

  it('cancels a call parked for approval; a decision afterwards is a conflict', async () => {
    const res = await stack.call('/tools/wipe_disk/execute', { json: { disk: 'sda' } });
    expect(res.status).toBe(202);
    const { id, status: parked } = (await res.json()) as { id: string; status: string };
    expect(parked).toBe('pending_approval');
    const cancelled = await cancel(id);
    expect(cancelled.status).toBe(200);
    expect(await cancelled.json()).toMatchObject({ status: 'cancelled' });
    const approve = await stack.call(`/v1/approvals/${id}/approve`, { key: KEYS.admin, json: {} });
    expect(approve.status).toBe(409);
    const pending = (await (await stack.call('/v1/approvals', { key: KEYS.admin })).json()) as {
      id: string;
    }[];
    expect(pending.map((p) => p.id)).not.toContain(id);
  });

  it('a finished call is 409 conflict; another client’s call is 404; an admin may cancel any', async () => {
    const done = (await (
      await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } })
    ).json()) as { id: string };
    const finished = await cancel(done.id);
    expect(finished.status).toBe(409);
    expect(await finished.json()).toMatchObject({ error: { code: 'conflict' } });

    const id = await start('run_shell', { command: 'sleep 30' }, KEYS.bob);
    expect((await cancel(id, KEYS.alice)).status).toBe(404);
    expect((await cancel('not-a-call-id', KEYS.bob)).status).toBe(404);
    const byAdmin = await cancel(id, KEYS.admin);
    expect([200, 202]).toContain(byAdmin.status);
    expect(
      await until(
        () => status(id, KEYS.bob),
        (s) => s === 'cancelled',
      ),
    ).toBe('cancelled');
    expect(
      (
        (await (await stack.call(`/v1/calls/${id}`, { key: KEYS.bob })).json()) as {
          cancelledBy?: string;
        }
      ).cancelledBy,
    ).toBe('ops');
  }, 30_000);

  it('streams output over SSE from another replica before the call ends, then the outcome', async () => {
    const id = await start('run_shell', {
      command: 'echo first; sleep 2; echo second >&2; sleep 1; echo done',
    });
    const opened = performance.now();
    const res = await fetch(`${secondUrl}/v1/calls/${id}/events`, {
      headers: { authorization: `Bearer ${KEYS.alice}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await readEvents(res);
    const outputs = events.filter((e) => e.event === 'output');
    const outcome = events.at(-1)!;
    expect(outcome.event).toBe('outcome');
    expect(outcome.data).toMatchObject({ id, status: 'ok', result: { exitCode: 0 } });
    const text = (stream: string) =>
      outputs
        .filter((e) => e.data.stream === stream)
        .map((e) => e.data.text)
        .join('');
    expect(text('stdout')).toBe('first\ndone\n');
    expect(text('stderr')).toBe('second\n');
    const first = outputs[0]!;
    // The first line came while the call still had seconds to run.
    expect(outcome.at - first.at).toBeGreaterThan(1500);
    console.warn(`SSE first output after ${(first.at - opened).toFixed(0)} ms of the stream`);
    // Ids are the call's event sequence: increasing.
    const ids = events.filter((e) => e.id).map((e) => Number(e.id));
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
  }, 30_000);

  it('a stream opened after the call ended gives its status and outcome at once; unknown ids are 404', async () => {
    const done = (await (
      await stack.call('/tools/calculator/execute', { json: { expression: '6*7' } })
    ).json()) as { id: string };
    const res = await stack.call(`/v1/calls/${done.id}/events`);
    const events = await readEvents(res);
    expect(events.map((e) => e.event)).toEqual(['status', 'outcome']);
    expect(events[1]!.data).toMatchObject({ status: 'ok', result: 42 });
    expect((await stack.call(`/v1/calls/${randomUUID()}/events`)).status).toBe(404);
    expect((await stack.call(`/v1/calls/${done.id}/events`, { key: KEYS.bob })).status).toBe(404);
  });

  it('a cancelled call’s stream ends with the cancelled outcome', async () => {
    const id = await start('run_shell', { command: 'echo started; sleep 30' });
    const res = await stack.call(`/v1/calls/${id}/events`);
    let sawOutput!: () => void;
    const output = new Promise<void>((r) => (sawOutput = r));
    const reading = readEvents(res, (e) => {
      if (e.event === 'output') sawOutput();
    });
    await output;
    expect((await cancel(id)).status).toBe(200);
    const events = await reading;
    expect(events.at(-1)).toMatchObject({
      event: 'outcome',
      data: { status: 'cancelled', error: { code: 'cancelled' } },
    });
  }, 30_000);

  it('a bridge request whose client hangs up cancels its unfinished calls', async () => {
    const marker = `sleep 45.${Math.floor(Math.random() * 1e6)}`;
    const hangUp = new AbortController();
    const request = fetch(`${stack.url}/v1/tool-calls`, {
      method: 'POST',
      signal: hangUp.signal,
      headers: { authorization: `Bearer ${KEYS.bob}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        role: 'assistant',
        tool_calls: [
          {
            id: `call_${randomUUID()}`,
            type: 'function',
            function: { name: 'run_shell', arguments: JSON.stringify({ command: marker }) },
          },
        ],
      }),
    }).catch(() => undefined);
    await until(
      () => processesWith(marker),
      (n) => n > 0,
    );
    expect(processesWith(marker)).toBeGreaterThan(0);
    hangUp.abort();
    await request;
    expect(
      await until(
        () => processesWith(marker),
        (n) => n === 0,
        3000,
      ),
    ).toBe(0);
    // The worker records the call in its next batch, a few ms after it stopped.
    const recent = await until(
      async () =>
        (
          (await (await stack.call('/v1/stats', { key: KEYS.bob })).json()) as {
            recent: { tool: string; status: string }[];
          }
        ).recent,
      (calls) => calls.some((c) => c.tool === 'run_shell'),
      3000,
    );
    expect(recent.find((c) => c.tool === 'run_shell')?.status).toBe('cancelled');
  }, 30_000);
});
