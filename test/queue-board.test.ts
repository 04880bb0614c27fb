import { redact } from '@toolgate/calls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withoutSandboxWorker } from './support/fast-worker.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import type { ToolWorker } from '@toolgate/worker';

// BullMQ's dashboard at /admin/queues: admins only (a bearer key, or the cookie the console
// gets for it), read-only unless `server.queueDashboard.actions`. A worker that takes only the
// `fast` queue leaves a sandboxed call waiting in `sandbox`.

interface BoardQueue {
  name: string;
  counts: Record<string, number>;
  isPaused: boolean;
  readOnlyMode: boolean;
  jobs: { id: string; name: string; data: { args?: Record<string, unknown> } }[];
}

const SECRET = 'abcdefgh12345678';
const ARGS = { command: `printf '%s' 'Authorization: Bearer ${SECRET}' > header.txt` };

const board = (stack: Stack, path: string, init: Parameters<Stack['call']>[1] = {}) =>
  stack.call(`/admin/queues${path}`, { key: KEYS.admin, ...init });

/** Signs in as the console does; the cookie to send back. */
async function cookieFor(stack: Stack, key: string): Promise<string> {
  const res = await board(stack, '/sign-in', { method: 'POST', key });
  expect(res.status).toBe(204);
  const set = res.headers.get('set-cookie') ?? '';
  expect(set).toMatch(/HttpOnly/);
  expect(set).toMatch(/SameSite=Strict/);
  expect(set).toMatch(/Path=\/admin\/queues/);
  return set.split(';')[0]!;
}

async function queued(stack: Stack): Promise<string> {
  const res = await stack.call('/tools/run_shell/execute?wait=false', {
    json: ARGS,
  });
  expect(res.status).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

describe('queue dashboard, read-only (the default)', () => {
  let stack: Stack;
  let worker: ToolWorker;
  beforeAll(async () => {
    ({ stack, worker } = await withoutSandboxWorker());
  });
  afterAll(async () => {
    await worker?.close();
    await stack?.close();
  });

  it('refuses anonymous callers (401) and non-admin clients (403), page and API alike', async () => {
    for (const path of ['/', '/api/queues']) {
      const anonymous = await board(stack, path, { key: null });
      expect(anonymous.status).toBe(401);
      expect(((await anonymous.json()) as { error: { code: string } }).error.code).toBe(
        'unauthorized',
      );
      const client = await board(stack, path, { key: KEYS.alice });
      expect(client.status).toBe(403);
      expect(((await client.json()) as { error: { code: string } }).error.code).toBe('forbidden');
    }
    // Nor can a client key buy itself the cookie.
    expect((await board(stack, '/sign-in', { method: 'POST', key: KEYS.alice })).status).toBe(403);
    expect((await board(stack, '/static/favicon-32x32.png', { key: null })).status).toBe(401);
  });

  it('lists fast and sandbox to an admin key, with a waiting call and its arguments redacted', async () => {
    const id = await queued(stack);
    const res = await board(
      stack,
      `/api/queues?activeQueue=sandbox&status=latest&page=1&jobsPerPage=10`,
    );
    expect(res.status).toBe(200);
    const { queues } = (await res.json()) as { queues: BoardQueue[] };
    expect(queues.map((q) => q.name)).toEqual(expect.arrayContaining(['fast', 'sandbox']));
    const sandbox = queues.find((q) => q.name === 'sandbox')!;
    expect(sandbox.readOnlyMode).toBe(true);
    const job = sandbox.jobs.find((j) => j.id === id);
    expect(job, `call ${id} among the sandbox queue's jobs`).toMatchObject({ name: 'run_shell' });
    // The arguments redacted as the API shows them: secret-shaped text masked.
    expect(JSON.stringify(job!.data.args)).not.toContain(SECRET);
    expect(job!.data.args).toEqual(redact(ARGS));
    expect(String(job!.data.args?.command)).toContain('header.txt');
  });

  it('serves the board page from the package under a CSP that allows no other origin', async () => {
    const res = await board(stack, '/');
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    const html = await res.text();
    expect(html).toContain('<base href="/admin/queues/"');
    expect(html).not.toMatch(/https?:\/\//);
    const script = /<script defer src="([^"]+)"/.exec(html)?.[1];
    expect(script).toBeDefined();
    const asset = await board(stack, `/${script}`);
    expect(asset.status).toBe(200);
    expect(asset.headers.get('content-type')).toMatch(/javascript/);
  });

  it('takes the console’s cookie in place of the bearer header, and drops it on sign-out', async () => {
    const cookie = await cookieFor(stack, KEYS.admin);
    const res = await board(stack, '/api/queues', { key: null, headers: { cookie } });
    expect(res.status).toBe(200);
    const out = await board(stack, '/sign-out', { method: 'POST', key: null });
    expect(out.status).toBe(204);
    expect(out.headers.get('set-cookie')).toMatch(/^toolgate_board=; .*Max-Age=0/);
    const bad = await board(stack, '/api/queues', {
      key: null,
      headers: { cookie: 'toolgate_board=not-a-key' },
    });
    expect(bad.status).toBe(401);
  });

  it('refuses every write with actions off, and the call stays queued', async () => {
    const id = await queued(stack);
    for (const [method, path] of [
      ['PUT', `/api/queues/sandbox/${id}/clean`],
      ['PUT', `/api/queues/sandbox/clean/waiting`],
      ['PUT', '/api/queues/sandbox/pause'],
      ['POST', '/api/queues/sandbox/add'],
    ] as const) {
      const res = await board(stack, path, { method, json: {} });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain(
        'read-only',
      );
    }
    const call = await stack.call(`/v1/calls/${id}`);
    expect(((await call.json()) as { status: string }).status).toBe('queued');
    const { queues } = (await (await board(stack, '/api/queues')).json()) as {
      queues: BoardQueue[];
    };
    expect(queues.find((q) => q.name === 'sandbox')!.isPaused).toBe(false);
  });

  it('tells admins where the board is in /v1/me, and clients nothing', async () => {
    const admin = (await (await stack.call('/v1/me', { key: KEYS.admin })).json()) as {
      queueDashboard?: string;
    };
    expect(admin.queueDashboard).toBe('/admin/queues');
    const alice = (await (await stack.call('/v1/me')).json()) as { queueDashboard?: string };
    expect(alice.queueDashboard).toBeUndefined();
  });
});

describe('queue dashboard with actions on', () => {
  let stack: Stack;
  let worker: ToolWorker;
  beforeAll(async () => {
    ({ stack, worker } = await withoutSandboxWorker({
      server: { port: 0, host: '127.0.0.1', queueDashboard: { actions: true } },
    }));
  });
  afterAll(async () => {
    await worker?.close();
    await stack?.close();
  });

  const paused = async () =>
    ((await (await board(stack, '/api/queues')).json()) as { queues: BoardQueue[] }).queues.find(
      (q) => q.name === 'sandbox',
    )!.isPaused;

  it('lets a script with an admin key pause and resume a queue', async () => {
    expect((await board(stack, '/api/queues/sandbox/pause', { method: 'PUT' })).status).toBe(200);
    expect(await paused()).toBe(true);
    expect((await board(stack, '/api/queues/sandbox/resume', { method: 'PUT' })).status).toBe(200);
    expect(await paused()).toBe(false);
  });

  it('takes a cookie-signed write from the board’s own page only', async () => {
    const cookie = await cookieFor(stack, KEYS.admin);
    const from = (site: string) =>
      board(stack, '/api/queues/sandbox/pause', {
        method: 'PUT',
        key: null,
        headers: { cookie, 'sec-fetch-site': site },
      });
    const crossSite = await from('same-site');
    expect(crossSite.status).toBe(403);
    expect(await paused()).toBe(false);
    expect((await from('same-origin')).status).toBe(200);
    expect(await paused()).toBe(true);
    await board(stack, '/api/queues/sandbox/resume', { method: 'PUT' });
  });

  it('is not mounted when server.queueDashboard.enabled is false', async () => {
    const off = await startStack({
      worker: false,
      config: { server: { port: 0, host: '127.0.0.1', queueDashboard: { enabled: false } } },
    });
    try {
      expect((await board(off, '/api/queues')).status).toBe(404);
      const me = (await (await off.call('/v1/me', { key: KEYS.admin })).json()) as object;
      expect(me).not.toHaveProperty('queueDashboard');
    } finally {
      await off.close();
    }
  });
});
