/**
 * Users inside a client (issue 22 §2), with real tokens: oidc-provider on loopback signs users
 * in (authorization code with PKCE through its real endpoints) for one shared client, `carol`.
 * Each user's calls are its own (lookup, cancel, event stream, idempotency key, listing), its
 * limits are its own, the client's turns are shared between its users, and under
 * `isolation: user` its memory and its workspace (real Docker sandboxes) are its own.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig } from '@toolgate/sandbox/testing';
import { startTelemetry } from '@toolgate/telemetry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAuthServer, type AuthServer } from './support/auth-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

const CAROL = {
  client_id: 'carol',
  client_secret: 'carol-secret-0123456789',
  scope: 'tools:all',
};
/** A second client whose users have tight limits of their own. */
const DORA = { client_id: 'dora', client_secret: 'dora-secret-0123456789', scope: 'tools:all' };
const SCOPE = 'tools:all';

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const exporter = new InMemorySpanExporter();
const telemetry = startTelemetry({
  serviceName: 'toolgate-test',
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
});

let as: AuthServer;
let stack: Stack;
let sandbox: Sandbox;
let dir: string;
let audience: string;
const tokens = new Map<string, string>();

/**
 * An access token for `user` signed in at the authorization server through client `carol`:
 * authorization request with PKCE, sign-in and consent, code exchanged at the token endpoint.
 */
async function signIn(user: string, client = CAROL): Promise<string> {
  const known = tokens.get(`${client.client_id}/${user}`);
  if (known) return known;
  const { access_token } = await as.userToken(client, user, SCOPE, audience);
  tokens.set(`${client.client_id}/${user}`, access_token);
  return access_token;
}

/** A request as `user` (a real token), or with `key` (an API key). */
async function call(
  who: { user: string; client?: typeof CAROL } | { key: string },
  path: string,
  init: { json?: unknown; method?: string; headers?: Record<string, string> } = {},
): Promise<Response> {
  const token = 'user' in who ? await signIn(who.user, who.client) : who.key;
  return stack.call(path, { ...init, key: token });
}

const ann = { user: 'ann' };
const ben = { user: 'ben' };
const admin = { key: KEYS.admin };

beforeAll(async () => {
  const port = await freePort();
  audience = `http://127.0.0.1:${port}/mcp`;
  as = await startAuthServer({ audience, scopes: [SCOPE], clients: [CAROL, DORA] });
  dir = mkdtempSync(join(tmpdir(), 'toolgate-users-'));
  sandbox = await createSandbox(testSandboxConfig('docker', dir));
  stack = await startStack({
    port,
    tools: testTools,
    services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
    config: {
      worker: { metricsPort: 0, concurrency: 1, sandboxConcurrency: 2 },
      clients: [
        {
          id: 'carol',
          tools: ['*'],
          isolation: 'user',
          limits: { perUser: { queued: 3, rateLimit: { perMinute: 1000 } } },
        },
        {
          id: 'dora',
          tools: ['*'],
          limits: { perUser: { rateLimit: { perMinute: 3 }, sandboxInFlight: 1 } },
        },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      auth: { oauth: { issuer: as.issuer, audience, scopes: { [SCOPE]: ['*'] } } },
    },
  });
}, 120_000);

afterAll(async () => {
  await stack?.close();
  await sandbox?.close();
  await as?.close();
  await telemetry.shutdown();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Waits until none of `ids` is queued or running any more. */
async function settled(ids: string[]): Promise<void> {
  await expect
    .poll(
      async () => {
        const statuses = await Promise.all(
          ids.map(async (id) => {
            const res = await call(admin, `/v1/calls/${id}`);
            return ((await res.json()) as { status: string }).status;
          }),
        );
        return statuses.every((s) => s !== 'queued' && s !== 'running');
      },
      { timeout: 15_000, interval: 100 },
    )
    .toBe(true);
}

describe("a user's calls are its own", () => {
  it('another user of the same client gets 404 for the call: lookup, cancel, event stream', async () => {
    const res = await call(ann, '/tools/sleep/execute?wait=false', { json: { ms: 1500 } });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };

    const own = await call(ann, `/v1/calls/${id}`);
    expect(own.status).toBe(200);
    expect(await own.json()).toMatchObject({ id, client: 'carol', user: 'ann', tool: 'sleep' });

    for (const [path, method] of [
      [`/v1/calls/${id}`, 'GET'],
      [`/v1/calls/${id}/cancel`, 'POST'],
      [`/v1/calls/${id}/events`, 'GET'],
    ] as const) {
      const other = await call(ben, path, { method });
      expect(other.status, `${method} ${path}`).toBe(404);
      expect(((await other.json()) as { error: { code: string } }).error.code).toBe('not_found');
    }
    // Ben's cancel did nothing: Ann's call runs to its end, and Ann may still cancel hers.
    const cancel = await call(ann, `/v1/calls/${id}/cancel`, { method: 'POST' });
    expect([200, 202]).toContain(cancel.status);
    await settled([id]);
    const after = await call(ann, `/v1/calls/${id}`);
    expect(await after.json()).toMatchObject({ status: 'cancelled', user: 'ann' });
  });

  it("an idempotency key is the user's: another user's same key runs a call of its own", async () => {
    const key = `k-${randomUUID()}`;
    const headers = { 'idempotency-key': key };
    const first = (await (
      await call(ann, '/tools/count_runs/execute', { json: {}, headers })
    ).json()) as { id: string };
    const again = (await (
      await call(ann, '/tools/count_runs/execute', { json: {}, headers })
    ).json()) as { id: string };
    expect(again.id).toBe(first.id);
    const other = await call(ben, '/tools/count_runs/execute', { json: {}, headers });
    expect(other.status).toBe(200);
    const body = (await other.json()) as { id: string; status: string };
    expect(body.status).toBe('ok');
    expect(body.id).not.toBe(first.id);
    // Ben's answer is a call of Ben's, not a view of Ann's.
    expect(await (await call(ben, `/v1/calls/${body.id}`)).json()).toMatchObject({ user: 'ben' });
  });

  it('GET /v1/calls lists a user only its own calls; ?user= filters for an admin; audit, stats, series and traces show the user', async () => {
    const mine = (await (
      await call(ann, '/tools/calculator/execute', { json: { expression: '1+1' } })
    ).json()) as { id: string };
    const theirs = (await (
      await call(ben, '/tools/calculator/execute', { json: { expression: '2+2' } })
    ).json()) as { id: string };

    type List = { calls: { id: string; user?: string; client: string }[] };
    const annList = (await (await call(ann, '/v1/calls?limit=200')).json()) as List;
    expect(annList.calls.map((c) => c.id)).toContain(mine.id);
    expect(annList.calls.map((c) => c.id)).not.toContain(theirs.id);
    expect(new Set(annList.calls.map((c) => c.user))).toEqual(new Set(['ann']));

    const asked = await call(ann, '/v1/calls?user=ben');
    expect(asked.status).toBe(403);

    const filtered = (await (
      await call(admin, '/v1/calls?client=carol&user=ben&limit=200')
    ).json()) as List;
    expect(filtered.calls.map((c) => c.id)).toContain(theirs.id);
    expect(filtered.calls.map((c) => c.id)).not.toContain(mine.id);
    expect(filtered.calls.every((c) => c.user === 'ben' && c.client === 'carol')).toBe(true);

    expect((await call(admin, `/v1/calls?user=${'x'.repeat(300)}`)).status).toBe(400);

    // Stats per user: the admin sees both users of carol; Ann her own row and calls only.
    type Report = { users?: { user: string; calls: number }[]; recent: { user?: string }[] };
    await expect
      .poll(async () => {
        const report = (await (await call(admin, '/v1/stats?client=carol')).json()) as Report;
        return (report.users ?? []).map((u) => u.user).sort();
      })
      .toEqual(['ann', 'ben']);
    const annStats = (await (await call(ann, '/v1/stats')).json()) as Report;
    expect(annStats.users?.map((u) => u.user)).toEqual(['ann']);
    expect(annStats.users?.[0]?.calls).toBeGreaterThan(0);
    expect(annStats.recent.length).toBeGreaterThan(0);
    expect(annStats.recent.every((c) => c.user === 'ann')).toBe(true);

    // Traces: the gateway's and the worker's spans of Ben's call carry his user.
    await expect
      .poll(() =>
        exporter
          .getFinishedSpans()
          .filter(
            (span) =>
              span.attributes['toolgate.user'] === 'ben' &&
              (span.name === 'toolgate.call' || span.attributes['toolgate.call_id'] === theirs.id),
          )
          .map((span) => span.name)
          .sort(),
      )
      .toEqual(expect.arrayContaining(['toolgate.call', 'toolgate.execute']));

    // Series per user: each minute's calls of one user.
    type Series = { user?: { id: string; calls: number[] } };
    const sum = (s: Series) => (s.user?.calls ?? []).reduce((a, b) => a + b, 0);
    await expect
      .poll(async () => (await (await call(ann, '/v1/series?minutes=5')).json()) as Series)
      .toMatchObject({ user: { id: 'ann' } });
    expect(sum((await (await call(ann, '/v1/series?minutes=5')).json()) as Series)).toBeGreaterThan(
      0,
    );
    expect((await call(ann, '/v1/series?minutes=5&user=ben')).status).toBe(403);
    const benSeries = (await (
      await call(admin, '/v1/series?minutes=5&client=carol&user=ben')
    ).json()) as Series;
    expect(benSeries.user?.id).toBe('ben');
    expect(sum(benSeries)).toBeGreaterThan(0);

    await expect
      .poll(async () => {
        const res = await call(admin, `/v1/audit?client=carol&callId=${theirs.id}`);
        return (await res.json()) as unknown[];
      })
      .toEqual([
        expect.objectContaining({ event: 'call', client: 'carol', user: 'ben', callId: theirs.id }),
      ]);
  });
});

describe('per-user limits and order', () => {
  it('a user at its limits.perUser.queued gets 429; another user of the same client is still served', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await call(ann, '/tools/sleep/execute?wait=false', { json: { ms: 300 } });
      expect(res.status).toBe(202);
      ids.push(((await res.json()) as { id: string }).id);
    }
    const over = await call(ann, '/tools/sleep/execute?wait=false', { json: { ms: 300 } });
    expect(over.status).toBe(429);
    expect(over.headers.get('retry-after')).toBe('2');
    expect(await over.json()).toMatchObject({
      error: { code: 'too_many_in_flight', details: { scope: 'user', limit: 3, inFlight: 3 } },
    });

    const benRes = await call(ben, '/tools/calculator/execute', { json: { expression: '6*7' } });
    expect(benRes.status).toBe(200);
    expect(await benRes.json()).toMatchObject({ status: 'ok', result: 42 });

    await settled(ids);
    // Ann's calls ended: Ann is served again.
    const again = await call(ann, '/tools/calculator/execute', { json: { expression: '1' } });
    expect(again.status).toBe(200);
  });

  it("one slot: a user's call waits behind at most one of another user's queued calls, not the whole backlog", async () => {
    // The fast queue has one slot (worker.concurrency 1). Ann queues three 400 ms calls (her
    // limit); Ben's call comes after all of them. Within one client the queue used to be
    // first come first served: Ben waited for all three (~1.2 s).
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await call(ann, '/tools/sleep/execute?wait=false', { json: { ms: 400 } });
      ids.push(((await res.json()) as { id: string }).id);
    }
    const benRes = await call(ben, '/tools/sleep/execute', { json: { ms: 10 } });
    expect(await benRes.json()).toMatchObject({ status: 'ok' });
    const statuses = await Promise.all(
      ids.map(
        async (id) =>
          ((await (await call(ann, `/v1/calls/${id}`)).json()) as { status: string }).status,
      ),
    );
    // Ann's first ran (or was running) and her second may have gone before Ben (equal
    // priority, earlier arrival); her third waited for Ben.
    expect(statuses.filter((s) => s === 'ok').length).toBeLessThanOrEqual(2);
    expect(statuses[2]).not.toBe('ok');
    await settled(ids);
  });
});

describe('per-user limits (client dora: 3 calls a minute, 1 sandbox call running per user)', () => {
  const dAnn = { user: 'ann', client: DORA };
  const dBen = { user: 'ben', client: DORA };

  it('a user over limits.perUser.rateLimit gets 429 rate_limited; another user of the client is served', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await call(dAnn, '/tools/calculator/execute', { json: { expression: '1+1' } });
      expect(res.status).toBe(200);
    }
    const over = await call(dAnn, '/tools/calculator/execute', { json: { expression: '1+1' } });
    expect(over.status).toBe(429);
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await over.json()).toMatchObject({
      error: { code: 'rate_limited', details: { scope: 'user', limitPerMinute: 3 } },
    });
    const other = await call(dBen, '/tools/calculator/execute', { json: { expression: '2+2' } });
    expect(other.status).toBe(200);
  });

  it('a user runs at most limits.perUser.sandboxInFlight sandbox calls at once; another user runs beside it (docker)', async () => {
    const start = async (who: typeof dAnn) => {
      const res = await call(who, '/tools/run_shell/execute?wait=false', {
        json: { command: 'sleep 1' },
      });
      expect(res.status).toBe(202);
      return ((await res.json()) as { id: string }).id;
    };
    // Fresh users of dora (Ann spent her rate above): Cy queues two, Dee one.
    const cy = { user: 'cy', client: DORA };
    const cyIds = [await start(cy), await start(cy)];
    const dee = await start({ user: 'dee', client: DORA });
    let cyMax = 0;
    let besideDee = false;
    const deadline = Date.now() + 20_000;
    for (;;) {
      const statuses = await Promise.all(
        [...cyIds, dee].map(
          async (id) =>
            ((await (await call(admin, `/v1/calls/${id}`)).json()) as { status: string }).status,
        ),
      );
      const cyRunning = statuses.slice(0, 2).filter((s) => s === 'running').length;
      cyMax = Math.max(cyMax, cyRunning);
      if (cyRunning > 0 && statuses[2] === 'running') besideDee = true;
      if (statuses.every((s) => s === 'ok') || Date.now() > deadline) {
        expect(statuses).toEqual(['ok', 'ok', 'ok']);
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(cyMax).toBe(1);
    expect(besideDee).toBe(true);
  }, 40_000);
});

describe('isolation: user', () => {
  it("a user's memory is its own: another user of the client finds nothing", async () => {
    const saved = await call(ann, '/tools/memory_save/execute', {
      json: { text: 'ann prefers the aubergine recipe' },
    });
    expect(await saved.json()).toMatchObject({ status: 'ok' });
    const own = await call(ann, '/tools/memory_search/execute', { json: { query: 'aubergine' } });
    expect(await own.json()).toMatchObject({
      result: { results: [expect.objectContaining({ text: 'ann prefers the aubergine recipe' })] },
    });
    const other = await call(ben, '/tools/memory_search/execute', { json: { query: 'aubergine' } });
    expect(await other.json()).toMatchObject({ status: 'ok', result: { results: [] } });
  });

  it("a user's workspace is its own: another user of the client cannot read its files (docker)", async () => {
    const wrote = await call(ann, '/tools/file_write/execute', {
      json: { path: 'secret.txt', content: 'ann only' },
    });
    expect(await wrote.json()).toMatchObject({ status: 'ok' });
    const own = await call(ann, '/tools/file_read/execute', { json: { path: 'secret.txt' } });
    expect(await own.json()).toMatchObject({ result: { content: 'ann only' } });
    const other = await call(ben, '/tools/file_read/execute', { json: { path: 'secret.txt' } });
    expect(await other.json()).toMatchObject({ status: 'error' });
    const shell = await call(ben, '/tools/run_shell/execute', {
      json: { command: 'ls -A /workspace; cat /workspace/secret.txt 2>&1 || true' },
    });
    const out = (await shell.json()) as { status: string; result: { stdout: string } };
    expect(out.status).toBe('ok');
    expect(out.result.stdout).not.toContain('ann only');
  }, 60_000);
});
