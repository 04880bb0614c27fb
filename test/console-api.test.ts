/**
 * The routes the operator console reads besides the API it drives: who the key is, the call
 * list, the approvals' live stream, a call's audit entries, the time series, and the console's
 * own files under a strict CSP.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type {
  ApprovalEvent,
  AuditList,
  CallList,
  CallView,
  SeriesView,
  WhoAmI,
} from '@toolgate/gateway';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

let stack: Stack;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'toolgate-console-'));
  mkdirSync(join(dir, 'assets'));
  writeFileSync(join(dir, 'index.html'), '<!doctype html><title>toolgate</title>');
  writeFileSync(join(dir, 'assets', 'app.js'), 'console.log(1)');
  stack = await startStack({
    tools: testTools,
    config: {
      console: { dir, traceUrl: 'http://jaeger.local/trace/{traceId}' },
      server: { port: 0, host: '127.0.0.1', sweepIntervalMs: 200 },
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 10_000 } },
        {
          id: 'bob',
          key: KEYS.bob,
          tools: ['current_time', 'category:math', 'wipe_disk'],
          rateLimit: { perMinute: 10_000 },
        },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true, rateLimit: { perMinute: 10_000 } },
      ],
    },
  });
});
afterAll(async () => {
  await stack?.close();
  rmSync(dir, { recursive: true, force: true });
});

const json = async <T>(path: string, key: string = KEYS.alice) => {
  const res = await stack.call(path, { key });
  return { status: res.status, body: (await res.json()) as T };
};
const run = async (tool: string, args: unknown, key: string = KEYS.alice) =>
  (await (await stack.call(`/tools/${tool}/execute`, { json: args, key })).json()) as {
    id: string;
    status: string;
  };

describe('who the key is', () => {
  it('answers the client, whether it is an admin, and the trace viewer', async () => {
    expect((await json<WhoAmI>('/v1/me')).body).toEqual({
      client: 'alice',
      admin: false,
      traceUrl: 'http://jaeger.local/trace/{traceId}',
    });
    expect((await json<WhoAmI>('/v1/me', KEYS.admin)).body).toMatchObject({
      client: 'ops',
      admin: true,
    });
    expect((await stack.call('/v1/me', { key: null })).status).toBe(401);
  });
});

describe('the call list', () => {
  it('shows a client its own calls, newest first, filtered; never another client’s', async () => {
    const a = await run('calculator', { expression: '1+1' });
    const b = await run('calculator', { expression: '1/' });
    const mine = await run('current_time', {}, KEYS.bob);
    // The worker answers first and records the call a few ms later (its record batch): read
    // until b's record is in, as a console refreshing would.
    const listed = async () => {
      for (let i = 0; ; i++) {
        const list = await json<CallList>('/v1/calls');
        const row = list.body.calls.find((c) => c.id === b.id);
        if ((row && row.status !== 'running' && row.status !== 'queued') || i === 50) return list;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    const { body } = await listed();
    const ids = body.calls.map((c) => c.id);
    expect(ids.indexOf(b.id)).toBeLessThan(ids.indexOf(a.id));
    expect(ids).not.toContain(mine.id);
    expect(body.calls.find((c) => c.id === b.id)).toMatchObject({
      tool: 'calculator',
      client: 'alice',
      status: 'error',
      errorCode: 'invalid_expression',
    });
    const errors = await json<CallList>('/v1/calls?status=error&tool=calculator');
    expect(errors.body.calls.map((c) => c.id)).toEqual(expect.arrayContaining([b.id]));
    expect(errors.body.calls.every((c) => c.status === 'error')).toBe(true);
    // Asking for another client's calls is refused; an admin may.
    expect((await json('/v1/calls?client=bob')).status).toBe(403);
    const bobs = await json<CallList>('/v1/calls?client=bob', KEYS.admin);
    expect(bobs.body.calls.map((c) => c.id)).toContain(mine.id);
    expect(bobs.body.calls.every((c) => c.client === 'bob')).toBe(true);
    const all = await json<CallList>('/v1/calls', KEYS.admin);
    expect(all.body.calls.map((c) => c.id)).toEqual(expect.arrayContaining([a.id, mine.id]));
  });

  it('lists calls in flight with their state, and parked ones', async () => {
    const res = await stack.call('/tools/sleep/execute?wait=false', { json: { ms: 1500 } });
    const { id } = (await res.json()) as { id: string };
    const parked = await run('wipe_disk', { disk: 'sdz' });
    const { body } = await json<CallList>('/v1/calls');
    const row = body.calls.find((c) => c.id === id);
    expect(['queued', 'running']).toContain(row?.status);
    expect(body.calls.find((c) => c.id === parked.id)?.status).toBe('pending_approval');
  });

  it('refuses bad filters with 400', async () => {
    for (const q of ['status=done', 'since=yesterday', 'limit=0', 'limit=500', 'tool=a&tool=b']) {
      const res = await stack.call(`/v1/calls?${q}`);
      expect(res.status, q).toBe(400);
    }
  });
});

describe('a call’s detail', () => {
  it('has its client and its arguments, redacted; admins read its audit entries', async () => {
    const call = await run('lookup', { q: 'token=sk-abcdefghijklmnopqrstuvwxyz012345' });
    let view!: CallView;
    for (let i = 0; i < 50; i++) {
      view = (await json<CallView>(`/v1/calls/${call.id}`)).body;
      if (view.arguments !== undefined) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(view).toMatchObject({ id: call.id, client: 'alice', status: 'ok' });
    expect(JSON.stringify(view.arguments)).not.toContain('sk-abcdefghijklmnopqrstuvwxyz012345');
    expect(JSON.stringify(view.arguments)).toContain('token=');
    const audit = await json<AuditList>(`/v1/audit?callId=${call.id}`, KEYS.admin);
    expect(audit.body.length).toBeGreaterThan(0);
    expect(audit.body.every((e) => e.callId === call.id)).toBe(true);
    expect((await stack.call(`/v1/audit?callId=${call.id}`)).status).toBe(403);
    expect((await stack.call('/v1/audit?callId=nope', { key: KEYS.admin })).status).toBe(400);
  });
});

describe('the approvals’ live stream', () => {
  it('gives a snapshot, then parked, decided and cancelled calls as they happen', async () => {
    const events: ApprovalEvent[] = [];
    const stop = new AbortController();
    const res = await fetch(`${stack.url}/v1/approvals/events`, {
      headers: { authorization: `Bearer ${KEYS.admin}` },
      signal: stop.signal,
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reading = (async () => {
      const decoder = new TextDecoder();
      let buffer = '';
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          buffer += decoder.decode(chunk, { stream: true });
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const data = /^data: (.*)$/m.exec(buffer.slice(0, end))?.[1];
            buffer = buffer.slice(end + 2);
            if (data) events.push(JSON.parse(data) as ApprovalEvent);
          }
        }
      } catch {
        // aborted
      }
    })();
    const until = async (ok: () => boolean) => {
      for (let i = 0; i < 100 && !ok(); i++) await new Promise((r) => setTimeout(r, 30));
    };
    await until(() => events.some((e) => e.type === 'snapshot'));
    const first = await run('wipe_disk', { disk: 'sda' }, KEYS.bob);
    const second = await run('wipe_disk', { disk: 'sdb' }, KEYS.bob);
    await until(() => events.filter((e) => e.type === 'parked').length >= 2);
    const reject = await stack.call(`/v1/approvals/${first.id}/reject`, {
      key: KEYS.admin,
      json: { reason: 'not today' },
    });
    expect(reject.status).toBe(200);
    // The second operator loses: the call was already decided.
    const late = await stack.call(`/v1/approvals/${first.id}/approve`, {
      key: KEYS.admin,
      json: {},
    });
    expect(late.status).toBe(409);
    expect(
      (await stack.call(`/v1/calls/${second.id}/cancel`, { key: KEYS.bob, method: 'POST' })).status,
    ).toBe(200);
    await until(() => events.some((e) => e.type === 'cancelled'));
    stop.abort();
    await reading;
    expect(events[0]).toMatchObject({ type: 'snapshot' });
    expect(events.filter((e) => e.type === 'parked')).toEqual([
      expect.objectContaining({
        approval: expect.objectContaining({ id: first.id, client: 'bob' }),
      }),
      expect.objectContaining({ approval: expect.objectContaining({ id: second.id }) }),
    ]);
    expect(events).toContainEqual({
      type: 'decided',
      id: first.id,
      client: 'bob',
      decision: 'rejected',
      by: 'ops',
      reason: 'not today',
    });
    expect(events).toContainEqual({
      type: 'cancelled',
      id: second.id,
      client: 'bob',
      by: 'bob',
    });
    expect((await stack.call('/v1/approvals/events')).status).toBe(403);
  });
});

describe('the time series', () => {
  it('counts calls, errors and p95 per tool per minute; a client sees only its own', async () => {
    await run('calculator', { expression: '2+2' }, KEYS.bob);
    await run('calculator', { expression: '2+' }, KEYS.bob);
    // The worker counts a call in its record batch, a few ms after the reply: read until bob's
    // two are in (summed over the window, in case a minute ended in between) and the gateway
    // has sampled its gauges.
    const total = (view: SeriesView) =>
      (view.tools.calculator?.calls ?? []).reduce((sum, n) => sum + n, 0);
    let admin!: SeriesView;
    let bob!: SeriesView;
    for (let i = 0; i < 50; i++) {
      admin = (await json<SeriesView>('/v1/series?minutes=5', KEYS.admin)).body;
      bob = (await json<SeriesView>('/v1/series?minutes=5', KEYS.bob)).body;
      const sampled = admin.workers.at(-1) !== null && admin.workers.at(-1) !== undefined;
      if (sampled && total(bob) === 2) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(admin.points).toBe(5);
    expect(admin.stepSeconds).toBe(60);
    const calc = admin.tools.calculator!;
    expect(calc.calls).toHaveLength(5);
    expect(total(admin)).toBeGreaterThanOrEqual(2);
    expect(calc.errors.reduce((sum, n) => sum + n, 0)).toBeGreaterThanOrEqual(1);
    expect(calc.p95Ms.some((ms) => ms !== null && ms > 0)).toBe(true);
    expect(admin.workers.at(-1)).toBe(1);
    expect(admin.queue.fast.at(-1)).toBeGreaterThanOrEqual(0);
    // bob's own calculator calls only (alice made more), and no fleet gauges for a client.
    expect(total(bob)).toBe(2);
    expect(bob.tools.lookup).toBeUndefined();
    expect(bob.workers).toEqual([]);
    expect((await stack.call('/v1/series?minutes=0')).status).toBe(400);
  });
});

describe('the console’s files', () => {
  it('are served under a strict CSP, with the page for its client-side routes', async () => {
    const page = await fetch(`${stack.url}/console/`);
    expect(page.status).toBe(200);
    const csp = page.headers.get('content-security-policy')!;
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(await page.text()).toContain('<title>toolgate</title>');
    const route = await fetch(`${stack.url}/console/calls/123`);
    expect(route.status).toBe(200);
    expect(route.headers.get('content-security-policy')).toBe(csp);
    expect((await fetch(`${stack.url}/console/assets/app.js`)).status).toBe(200);
    expect((await fetch(`${stack.url}/console/assets/missing.js`)).status).toBe(404);
    // No key needed for the page itself; the API still wants one.
    expect((await fetch(`${stack.url}/console`, { redirect: 'manual' })).status).toBe(301);
  });

  it('say how to build the console when it is not built', async () => {
    const bare = await startStack({ config: { console: { dir: join(dir, 'nothing-here') } } });
    try {
      const res = await fetch(`${bare.url}/console/`);
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain(
        'pnpm --filter @toolgate/console build',
      );
    } finally {
      await bare.close();
    }
  });
});
