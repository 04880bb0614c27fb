/**
 * Sessions and held connections bound to their user (issue 22 §2, docs/auth.md "Bound to the
 * user"): with real tokens from oidc-provider (authorization code with PKCE), one user's
 * session is unknown to another user of the same client, and `limits.perUser.sessions` /
 * `limits.perUser.streams` keep one user from holding all of the client's sessions or streams;
 * an admin's workspace reset of the client reaches its users' own workspaces (`isolation:
 * user`), or one user's with `?user=`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Keys, WorkspaceResets, createRedis, type RedisClient } from '@toolgate/calls';
import {
  createSandbox,
  createWorkspaces,
  type Sandbox,
  type WorkspaceResetSource,
  type Workspaces,
} from '@toolgate/sandbox';
import { testSandboxConfig } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAuthServer, type AuthServer } from './support/auth-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

const CAROL = { client_id: 'carol', client_secret: 'carol-secret-0123456789', scope: 'tools:all' };
const SCOPE = 'tools:all';

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let as: AuthServer;
let stack: Stack;
let sandbox: Sandbox;
let dir: string;
let redis: RedisClient;
let workspaces: Workspaces;
let audience: string;
const tokens = new Map<string, string>();

/** An access token for `user` of client carol: authorization code with PKCE, real endpoints. */
async function signIn(user: string): Promise<string> {
  const known = tokens.get(user);
  if (known) return known;
  const { access_token } = await as.userToken(CAROL, user, SCOPE, audience);
  tokens.set(user, access_token);
  return access_token;
}

async function call(
  who: { user: string } | { key: string },
  path: string,
  init: RequestInit & { json?: unknown } = {},
): Promise<Response> {
  const key = 'user' in who ? await signIn(who.user) : who.key;
  return stack.call(path, { ...init, key });
}

const errorCode = async (res: Response) =>
  ((await res.json()) as { error: { code: string } }).error.code;

const ann = { user: 'ann' };
const ben = { user: 'ben' };
const carolKey = { key: KEYS.alice };
const admin = { key: KEYS.admin };

beforeAll(async () => {
  const port = await freePort();
  audience = `http://127.0.0.1:${port}/mcp`;
  as = await startAuthServer({ audience, scopes: [SCOPE], clients: [CAROL] });
  dir = mkdtempSync(join(tmpdir(), 'toolgate-user-sessions-'));
  sandbox = await createSandbox(testSandboxConfig('docker', dir));
  // Admin resets as the worker reads them (services/worker/src/sandbox.ts), under the stack's
  // Redis prefix once it is known.
  const late: { resets?: WorkspaceResets } = {};
  const source: WorkspaceResetSource = {
    current: (name) => late.resets!.current(name),
    all: () => late.resets!.all(),
    idIn: (all, name) => late.resets!.idIn(all, name),
  };
  workspaces = createWorkspaces(sandbox.config, { resets: source });
  stack = await startStack({
    port,
    tools: testTools,
    services: { sandbox, workspaces },
    config: {
      clients: [
        {
          id: 'carol',
          key: KEYS.alice,
          tools: ['*'],
          isolation: 'user',
          rateLimit: { perMinute: 100_000 },
          limits: { sessions: 3, perUser: { sessions: 2, streams: 1 } },
        },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      auth: { oauth: { issuer: as.issuer, audience, scopes: { [SCOPE]: ['*'] } } },
    },
  });
  redis = createRedis(stack.config.redis.url, 'command');
  late.resets = new WorkspaceResets(redis, new Keys(stack.config.redis.prefix));
}, 120_000);

afterAll(async () => {
  await stack?.close();
  await sandbox?.close();
  await as?.close();
  redis?.disconnect();
  await workspaces?.unmountAll();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const open = async (who: { user: string } | { key: string }) => {
  const res = await call(who, '/v1/sessions', { method: 'POST', json: { tool: 'run_python' } });
  expect(res.status).toBe(201);
  return ((await res.json()) as { id: string }).id;
};
const listed = async (who: { user: string } | { key: string }) => {
  const res = await call(who, '/v1/sessions');
  expect(res.status).toBe(200);
  return ((await res.json()) as { sessions: { id: string; user?: string }[] }).sessions;
};

describe("a user's sessions are its own", () => {
  it('another user of the same client gets 404 session_not_found on use and DELETE, and does not list it', async () => {
    const s = await open(ann);
    const run = (who: { user: string } | { key: string }, code: string) =>
      call(who, '/tools/run_python/execute', {
        method: 'POST',
        json: { code },
        headers: { 'x-toolgate-session': s },
      });

    const first = await run(ann, 'x = 41');
    expect(await first.json()).toMatchObject({ status: 'ok' });

    // Ben: its use, its DELETE and its listing know nothing of Ann's session.
    const use = await run(ben, 'print(x)');
    expect(use.status).toBe(404);
    expect(await errorCode(use)).toBe('session_not_found');
    const del = await call(ben, `/v1/sessions/${s}`, { method: 'DELETE' });
    expect(del.status).toBe(404);
    expect(await errorCode(del)).toBe('session_not_found');
    expect((await listed(ben)).map((x) => x.id)).not.toContain(s);
    // The client's API key lists every user's sessions, naming the user, but cannot run in
    // one (under isolation: user it would reach the user's workspace).
    expect(await listed(carolKey)).toContainEqual(expect.objectContaining({ id: s, user: 'ann' }));
    const byKey = await run(carolKey, 'print(x)');
    expect(byKey.status).toBe(404);

    // Ann's session is untouched: its state is there, and she lists and deletes it.
    const again = await run(ann, 'x + 1');
    expect(await again.json()).toMatchObject({ status: 'ok', result: { stdout: '42\n' } });
    expect((await listed(ann)).map((x) => x.id)).toEqual([s]);
    expect((await call(ann, `/v1/sessions/${s}`, { method: 'DELETE' })).status).toBe(204);
    expect(await listed(ann)).toEqual([]);
  }, 60_000);

  it('limits.perUser.sessions: a user at its share gets 429 too_many_sessions; another user still opens one', async () => {
    const a1 = await open(ann);
    const a2 = await open(ann);
    const refused = await call(ann, '/v1/sessions', {
      method: 'POST',
      json: { tool: 'run_python' },
    });
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({
      error: { code: 'too_many_sessions', details: { scope: 'user', limit: 2, sessions: 2 } },
    });
    // The client's cap (3) still has room for Ben, and is the client's in all.
    const b1 = await open(ben);
    const full = await call(ben, '/v1/sessions', { method: 'POST', json: { tool: 'run_python' } });
    expect(full.status).toBe(429);
    expect(await full.json()).toMatchObject({
      error: { code: 'too_many_sessions', details: { limit: 3 } },
    });
    for (const s of [a1, a2]) {
      expect((await call(ann, `/v1/sessions/${s}`, { method: 'DELETE' })).status).toBe(204);
    }
    // The client's key may end any of its users' sessions.
    expect((await call(carolKey, `/v1/sessions/${b1}`, { method: 'DELETE' })).status).toBe(204);
  });
});

describe('limits.perUser.streams', () => {
  it("a user holding its share of streams gets 429 too_many_streams; another user's stream is served", async () => {
    const res = await call(ann, '/tools/sleep/execute?wait=false', {
      method: 'POST',
      json: { ms: 3000 },
    });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const held = new AbortController();
    const first = await call(ann, `/v1/calls/${id}/events`, { signal: held.signal });
    expect(first.status).toBe(200);
    try {
      const second = await call(ann, `/v1/calls/${id}/events`);
      expect(second.status).toBe(429);
      expect(await second.json()).toMatchObject({
        error: { code: 'too_many_streams', details: { scope: 'user', limit: 1 } },
      });
      // Ben is not held up by Ann's stream (the client's cap is 16).
      const other = await call(ben, '/tools/sleep/execute?wait=false', {
        method: 'POST',
        json: { ms: 10 },
      });
      const otherId = ((await other.json()) as { id: string }).id;
      const bens = await call(ben, `/v1/calls/${otherId}/events`);
      expect(bens.status).toBe(200);
      await bens.text();
    } finally {
      held.abort();
    }
    // Ann's slot comes back when her stream closes.
    await expect
      .poll(
        async () => {
          const r = await call(ann, `/v1/calls/${id}/events`);
          const status = r.status;
          await r.body?.cancel();
          return status;
        },
        { timeout: 5000, interval: 100 },
      )
      .toBe(200);
  });
});

describe('DELETE /v1/workspaces/{client} under isolation: user', () => {
  const shell = async (who: { user: string }, command: string) => {
    const res = await call(who, '/tools/run_shell/execute', { method: 'POST', json: { command } });
    const body = (await res.json()) as { status: string; result: { stdout: string } };
    expect(body, JSON.stringify(body)).toMatchObject({ status: 'ok' });
    return body.result.stdout;
  };
  const files = (who: { user: string }) => shell(who, 'ls -A /workspace');
  const reset = (query = '') => call(admin, `/v1/workspaces/carol${query}`, { method: 'DELETE' });

  it("the client's reset empties every user's workspace; ?user= empties that user's alone", async () => {
    await shell(ann, 'echo a > /workspace/ann.txt');
    await shell(ben, 'echo b > /workspace/ben.txt');
    expect(await files(ann)).toBe('ann.txt\n');
    expect(await files(ben)).toBe('ben.txt\n');

    const all = await reset();
    expect(all.status).toBe(202);
    expect(await all.json()).toMatchObject({ client: 'carol', status: 'scheduled' });
    expect(await files(ann)).toBe('');
    expect(await files(ben)).toBe('');

    // Written after the reset: kept (the copies are made under the new id).
    await shell(ann, 'echo a2 > /workspace/ann2.txt');
    await shell(ben, 'echo b2 > /workspace/ben2.txt');
    expect(await files(ann)).toBe('ann2.txt\n');

    const one = await reset('?user=ann');
    expect(one.status).toBe(202);
    expect(await one.json()).toMatchObject({ client: 'carol', user: 'ann', status: 'scheduled' });
    expect(await files(ann)).toBe('');
    expect(await files(ben)).toBe('ben2.txt\n');
  }, 60_000);

  it('a bad ?user= is 400 invalid_request; a user is not an admin', async () => {
    for (const query of ['?user=', `?user=${'x'.repeat(257)}`, '?user=a&user=b']) {
      const res = await reset(query);
      expect(res.status, query).toBe(400);
      expect(await errorCode(res)).toBe('invalid_request');
    }
    expect((await call(ann, '/v1/workspaces/carol', { method: 'DELETE' })).status).toBe(403);
  });
});
