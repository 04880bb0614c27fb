/**
 * Who a token acts as (issue 29 §3, §5, §11): a token of an admin client is an admin only with
 * the admin scope, and the person acting is recorded in every decision and audit entry and may
 * not approve a call of their own; a token that names no usable user is refused unless its
 * client is configured for such tokens; and an MCP client's logging level is one user's, not
 * the whole client's. Tokens are signed with the key of a real authorization server
 * (oidc-provider on loopback), whose JWKS toolgate fetches as it would in production.
 */
import { createServer } from 'node:net';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  LoggingMessageNotificationSchema,
  type LoggingMessageNotification,
} from '@modelcontextprotocol/sdk/types.js';
import { Keys, SessionStore, createRedis } from '@toolgate/calls';
import { Type, type AnyToolSpec } from '@toolgate/registry';
import { SignJWT, importJWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAuthServer, type AuthServer } from './support/auth-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

/** Writes one line to stdout and one to stderr: an info and a warning log message on MCP. */
const say: AnyToolSpec = {
  name: 'say',
  description: 'Says one thing on stdout and one on stderr',
  category: 'test',
  parameters: Type.Object({}, { additionalProperties: false }),
  timeoutMs: 10_000,
  handler: (_args: object, ctx) => {
    ctx.events?.output('stdout', 'info line\n');
    ctx.events?.output('stderr', 'warn line\n');
    return Promise.resolve({ said: 2 });
  },
};

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let as: AuthServer;
let stack: Stack;
let audience: string;

/** An access token signed by the authorization server, with the claims a test wants. */
async function token(claims: Record<string, unknown>): Promise<string> {
  const key = await importJWK(as.privateJwk, 'RS256');
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    iss: as.issuer,
    aud: audience,
    iat: now,
    exp: now + 300,
    ...claims,
  })
    .setProtectedHeader({ alg: 'RS256', kid: 'as-key-1', typ: 'at+jwt' })
    .sign(key);
}

/** A person signed in through client `client` with `scope`. */
const as_ = (client: string, sub: string, scope = 'tools:all') =>
  token({ client_id: client, sub, scope });

interface Answer {
  status: number;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  headers: Headers;
}

async function request(
  credential: string,
  path: string,
  init: { method?: string; json?: unknown } = {},
): Promise<Answer> {
  const res = await stack.call(path, {
    key: credential,
    ...(init.method ? { method: init.method } : {}),
    ...(init.json === undefined ? {} : { json: init.json }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** Parks a calculator call (it needs approval here) as `credential`; its id. */
async function park(credential: string): Promise<string> {
  const parked = await request(credential, '/tools/calculator/execute', {
    json: { expression: '6*7' },
  });
  expect(parked).toMatchObject({ status: 202, body: { status: 'pending_approval' } });
  return parked.body.id as string;
}

beforeAll(async () => {
  const port = await freePort();
  audience = `http://127.0.0.1:${port}/mcp`;
  as = await startAuthServer({ audience, scopes: ['tools:all', 'toolgate:admin'], clients: [] });
  stack = await startStack({
    port,
    tools: [say],
    config: {
      clients: [
        { id: 'carol', tools: ['*'] }, // a shared assistant: tokens only
        { id: 'ci', tools: ['*'] }, // client-credentials tokens without a user
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      policy: { approval: { tools: ['calculator'] } },
      secrets: { key: 'a'.repeat(64) },
      auth: {
        oauth: {
          issuer: as.issuer,
          audience,
          scopes: { 'tools:all': ['*'] },
          tokensWithoutUser: ['ci'],
        },
      },
    },
  });
}, 60_000);

afterAll(async () => {
  await stack?.close();
  await as?.close();
});

describe('a token of an admin client', () => {
  it('without the admin scope is no admin: admin routes are a step-up to toolgate:admin', async () => {
    const mallory = await as_('ops', 'mallory', 'tools:all');
    const audit = await request(mallory, '/v1/audit');
    expect(audit.status).toBe(403);
    expect(audit.body.error).toMatchObject({
      code: 'insufficient_scope',
      details: { requiredScope: 'toolgate:admin', scope: 'tools:all toolgate:admin' },
    });
    expect(audit.headers.get('www-authenticate')).toMatch(
      /^Bearer error="insufficient_scope", scope="tools:all toolgate:admin"/,
    );
    for (const path of [
      '/v1/approvals',
      '/v1/upstreams',
      '/v1/admin/sessions',
      '/v1/secrets/carol',
    ])
      expect((await request(mallory, path)).status, path).toBe(403);
    const secret = await request(mallory, '/v1/secrets/carol/TOKEN', {
      method: 'PUT',
      json: { value: 'stolen' },
    });
    expect(secret.status).toBe(403);
    // Nor another client's calls, nor the approval of a parked one (its own included).
    const ann = await as_('carol', 'ann');
    const id = await park(ann);
    expect((await request(mallory, `/v1/calls/${id}`)).status).toBe(404);
    expect((await request(mallory, '/v1/calls?client=carol')).status).toBe(403);
    const approve = await request(mallory, `/v1/approvals/${id}/approve`, { method: 'POST' });
    expect(approve.status).toBe(403);
    expect((await request(KEYS.admin, `/v1/calls/${id}`)).body.status).toBe('pending_approval');
    expect((await request(mallory, '/v1/me')).body).toMatchObject({ client: 'ops', admin: false });
  });

  it('with the admin scope is an admin, and its user is named in every decision and entry', async () => {
    const alice = await as_('ops', 'alice', 'tools:all toolgate:admin');
    expect((await request(alice, '/v1/me')).body).toMatchObject({
      client: 'ops',
      user: 'alice',
      admin: true,
    });
    const id = await park(await as_('carol', 'ann'));
    const approved = await request(alice, `/v1/approvals/${id}/approve`, { method: 'POST' });
    expect(approved).toMatchObject({
      status: 200,
      body: { decision: 'approved', by: 'ops:alice' },
    });
    await expect
      .poll(async () => (await request(KEYS.admin, `/v1/calls/${id}`)).body)
      .toMatchObject({
        status: 'ok',
        user: 'ann',
        approval: { decision: 'approved', by: 'ops:alice' },
      });
    const put = await request(alice, '/v1/secrets/carol/API_TOKEN', {
      method: 'PUT',
      json: { value: 'v-123' },
    });
    expect(put.status).toBe(201);
    const reject = await request(
      alice,
      `/v1/approvals/${await park(await as_('carol', 'ben'))}/reject`,
      {
        method: 'POST',
        json: { reason: 'no' },
      },
    );
    expect(reject.body).toMatchObject({ decision: 'rejected', by: 'ops:alice' });

    const audit = await request(alice, '/v1/audit?client=carol&limit=50');
    expect(audit.status).toBe(200);
    const entries = audit.body as { event: string; by?: string; status: string; callId?: string }[];
    expect(entries).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          event: 'approval',
          callId: id,
          status: 'approved',
          user: 'ann',
          by: 'ops:alice',
        }),
        expect.objectContaining({ event: 'approval', status: 'rejected', by: 'ops:alice' }),
        expect.objectContaining({
          event: 'secret',
          secret: 'API_TOKEN',
          status: 'set',
          by: 'ops:alice',
        }),
      ]),
    );
  });

  it("records the user who ended another's session or reset a workspace", async () => {
    // A session of ann's, as a worker running sandboxes would host it (none runs here).
    const redis = createRedis(stack.config.redis, 'command');
    const store = new SessionStore(redis, Keys.for(stack.config.redis), 10_000);
    const made = await store.create({
      clientId: 'carol',
      user: 'ann',
      tool: 'run_python',
      workerId: 'w-none',
      cap: 4,
      idleMs: 60_000,
      lifetimeMs: 60_000,
    });
    await redis.quit();
    if (!made.created) throw new Error('no session');
    const alice = await as_('ops', 'alice', 'toolgate:admin');
    const mallory = await as_('ops', 'mallory');
    const end = `/v1/admin/sessions/${made.id}`;
    expect((await request(mallory, end, { method: 'DELETE' })).status).toBe(403);
    expect((await request(alice, end, { method: 'DELETE' })).status).toBe(204);
    const reset = await request(alice, '/v1/workspaces/carol?user=ann', { method: 'DELETE' });
    expect(reset.status).toBe(202);
    const entries = (await request(alice, '/v1/audit?client=carol&limit=50')).body as unknown[];
    expect(entries).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          event: 'session',
          user: 'ann',
          tool: 'run_python',
          status: 'ended',
          by: 'ops:alice',
        }),
        expect.objectContaining({
          event: 'workspace',
          user: 'ann',
          status: 'reset',
          by: 'ops:alice',
        }),
      ]),
    );
  });

  it('a user may not approve a call of their own, through any client; another admin may', async () => {
    const alice = await as_('ops', 'alice', 'tools:all toolgate:admin');
    for (const caller of [alice, await as_('carol', 'alice')]) {
      const id = await park(caller);
      const own = await request(alice, `/v1/approvals/${id}/approve`, { method: 'POST' });
      expect(own.status).toBe(403);
      expect(own.body.error.code).toBe('self_approval');
      expect((await request(KEYS.admin, `/v1/calls/${id}`)).body.status).toBe('pending_approval');
      const bob = await as_('ops', 'bob', 'toolgate:admin');
      const other = await request(bob, `/v1/approvals/${id}/approve`, { method: 'POST' });
      expect(other.body).toMatchObject({ decision: 'approved', by: 'ops:bob' });
    }
    // Rejecting (or cancelling) one's own call stays allowed: it runs nothing.
    const id = await park(alice);
    const reject = await request(alice, `/v1/approvals/${id}/reject`, { method: 'POST' });
    expect(reject.body).toMatchObject({ decision: 'rejected', by: 'ops:alice' });
  });
});

describe('a token without a usable user claim', () => {
  it('is refused 401 no_user: no sub, an empty one, a number', async () => {
    // The attack: ann's call, read by a token of her client that names nobody.
    const ann = await as_('carol', 'ann');
    const done = await request(ann, '/tools/current_time/execute', { json: {} });
    expect(done.status).toBe(200);
    const cases: [string, Record<string, unknown>][] = [
      ['no sub', {}],
      ['sub ""', { sub: '' }],
      ['sub 12345', { sub: 12345 }],
    ];
    for (const [name, claims] of cases) {
      const nobody = await token({ client_id: 'carol', scope: 'tools:all', ...claims });
      for (const path of [`/v1/calls/${done.body.id}`, '/v1/calls', '/v1/sessions']) {
        const res = await request(nobody, path);
        expect(res.status, `${name} ${path}`).toBe(401);
        expect(res.body.error).toMatchObject({
          code: 'unauthorized',
          details: { error: 'invalid_token', refusal: 'no_user' },
        });
        expect(res.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
      }
    }
  });

  it('acts as its client where auth.oauth.tokensWithoutUser names it (client credentials)', async () => {
    const ci = await token({ client_id: 'ci', scope: 'tools:all' });
    const me = await request(ci, '/v1/me');
    expect(me.status).toBe(200);
    expect(me.body).toEqual(expect.objectContaining({ client: 'ci', admin: false }));
    expect(me.body.user).toBeUndefined();
    // A malformed user claim is refused even there.
    const bad = await token({ client_id: 'ci', scope: 'tools:all', sub: 7 });
    expect((await request(bad, '/v1/me')).body.error.details.refusal).toBe('no_user');
  });
});

describe('MCP logging/setLevel', () => {
  async function mcpAs(credential: string) {
    const client = new McpClient({ name: 'level-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${credential}` } },
      }),
    );
    const logs: string[] = [];
    client.setNotificationHandler(
      LoggingMessageNotificationSchema,
      (n: LoggingMessageNotification) => {
        logs.push(`${n.params.level} ${String(n.params.data)}`);
      },
    );
    return { client, logs };
  }

  it("is one user's: another user of the client keeps its own level", async () => {
    const ann = await mcpAs(await as_('carol', 'ann-logs'));
    const ben = await mcpAs(await as_('carol', 'ben-logs'));
    try {
      await ann.client.setLoggingLevel('error');
      await ben.client.setLoggingLevel('info');
      await ann.client.setLoggingLevel('error'); // last word: ann's, on the same client
      await ben.client.callTool({ name: 'say', arguments: {} });
      expect(ben.logs).toEqual(['info info line', 'warning warn line']);
      await ann.client.callTool({ name: 'say', arguments: {} });
      expect(ann.logs).toEqual([]);
    } finally {
      await ann.client.close();
      await ben.client.close();
    }
  });
});
