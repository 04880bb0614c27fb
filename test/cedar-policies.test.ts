// Cedar policies in the call pipeline (docs/policy.md) against the real engine, Redis and an
// upstream: the example rules of examples/cedar over HTTP, MCP, code mode and the bridges,
// token groups, approvals, listings, the policy routes, reloads and bad input.
import { cpSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import {
  CodeModeCapabilities,
  Keys,
  SessionStore,
  createRedis,
  type RedisClient,
} from '@toolgate/calls';
import { createGateway } from '@toolgate/gateway';
import { createLogger } from '@toolgate/log';
import { Type, defineTool } from '@toolgate/registry';
import { startTelemetry } from '@toolgate/telemetry';
import { createToolRegistry } from '@toolgate/tools';
import { SignJWT, importJWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startAuthServer, type AuthServer } from './support/auth-server.js';
import { startCodeModeStack, whyNoCodeMode } from './support/code-mode-stack.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { startTestUpstream, type TestUpstream } from './support/test-upstream.js';

// The gateway's spans, read back (the `toolgate.policy.*` attributes).
const exporter = new InMemorySpanExporter();
const telemetry = startTelemetry({
  serviceName: 'toolgate-test',
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
});

const EXAMPLE = fileURLToPath(new URL('../examples/cedar/', import.meta.url));

/**
 * The built-in tools the rules name: http_get fails here (no network) after the policies let
 * it through, and the sandboxed ones are sent with `?wait=false` (this stack has no sandbox):
 * 200 or 202 is "let through", 403 `policy_denied` is the policies' refusal.
 */
const tools = [
  // As an upstream's tool would be (its category names the upstream), with a schema of its own.
  defineTool({
    name: 'github__create_issue',
    description: 'Opens an issue (stand-in for the github upstream)',
    category: 'upstream:github',
    parameters: Type.Object({ repo: Type.String(), title: Type.String() }),
    handler: ({ repo }) => ({ opened: repo }),
  }),
  defineTool({
    name: 'note',
    description: 'Keeps a note of free-form fields',
    category: 'test',
    parameters: Type.Object({ fields: Type.Record(Type.String(), Type.String()) }),
    handler: () => 'noted',
  }),
];
const through = (status: number) => status === 200 || status === 202;

/** Policies the test adds to the example's: an upstream's tools for one client; approvers. */
const EXTRA = `
@id("github-only-carol")
@reason("the github upstream is for carol's users")
forbid (principal, action == Toolgate::Action::"call", resource in Toolgate::Upstream::"github")
unless { principal in Toolgate::Client::"carol" };

@id("contractors-no-calculator")
@reason("contractors may not use the calculator")
forbid (
  principal in Toolgate::Group::"contractors",
  action == Toolgate::Action::"call",
  resource == Toolgate::Tool::"calculator"
);

@id("no-shell-sessions")
@reason("run_shell runs only as a call of its own, not in a session")
forbid (principal, action == Toolgate::Action::"call", resource == Toolgate::Tool::"run_shell")
when { context.session.active };

@id("file-delete-approvers")
@reason("only the ops group approves file deletions")
forbid (principal, action == Toolgate::Action::"approve", resource == Toolgate::Tool::"file_delete")
unless { principal in Toolgate::Group::"ops" };
`;

let dir: string;
let policies: string;
let as: AuthServer;
let upstream: TestUpstream;
let stack: Stack;
let audience: string;
let redis: RedisClient;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** An access token of `client` for `sub`, with groups and scopes. */
async function token(client: string, sub: string, groups?: string[], scope = 'tools:all') {
  const key = await importJWK(as.privateJwk, 'RS256');
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    iss: as.issuer,
    aud: audience,
    iat: now,
    exp: now + 300,
    client_id: client,
    sub,
    scope,
    ...(groups ? { groups } : {}),
  })
    .setProtectedHeader({ alg: 'RS256', kid: 'as-key-1', typ: 'at+jwt' })
    .sign(key);
}

interface Answer {
  status: number;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

async function request(
  credential: string,
  path: string,
  init: { method?: string; json?: unknown } = {},
  on: Stack = stack,
): Promise<Answer> {
  const res = await on.call(path, {
    key: credential,
    ...(init.method ? { method: init.method } : {}),
    ...(init.json === undefined ? {} : { json: init.json }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** One MCP request (stateless, 2025-era); its JSON-RPC result. */
async function mcp(credential: string, method: string, params: unknown) {
  const res = await stack.call('/mcp', {
    key: credential,
    json: { jsonrpc: '2.0', id: 1, method, params },
    headers: { accept: 'application/json, text/event-stream' },
  });
  const text = await res.text();
  if (!text.includes('result')) throw new Error(`MCP ${method}: ${res.status} ${text}`);
  const data = text.includes('data:')
    ? text
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5))
        .pop()!
    : text;
  return JSON.parse(data).result;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tg-cedar-'));
  policies = join(dir, 'policies');
  cpSync(join(EXAMPLE, 'policies'), policies, { recursive: true });
  cpSync(join(EXAMPLE, 'toolgate.cedarschema'), join(dir, 'toolgate.cedarschema'));
  writeFileSync(join(policies, 'test.cedar'), EXTRA);
  const port = await freePort();
  audience = `http://127.0.0.1:${port}/mcp`;
  as = await startAuthServer({ audience, scopes: ['tools:all', 'toolgate:admin'], clients: [] });
  upstream = await startTestUpstream();
  stack = await startStack({
    port,
    tools,
    config: {
      clients: [
        { id: 'assistant-a', key: KEYS.alice, tools: ['*'] },
        { id: 'support-assistant', key: KEYS.bob, tools: ['*'] },
        { id: 'carol', tools: ['*'] },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      upstreams: [{ id: 'github', url: upstream.url, trust: 'auto' }],
      policy: {
        http: { allowHosts: ['127.0.0.1'] },
        cedar: {
          policies,
          schema: join(dir, 'toolgate.cedarschema'),
          destructiveApproval: 'policies',
        },
      },
      auth: { oauth: oauth() },
    },
  });
  redis = createRedis(stack.config.redis, 'command');
}, 60_000);

afterAll(async () => {
  redis?.disconnect();
  await stack?.close();
  await upstream?.close();
  await as?.close();
  await telemetry.shutdown();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The OAuth settings of a stack whose tokens `token()` mints. */
const oauth = () => ({ issuer: as.issuer, audience, scopes: { 'tools:all': ['*'] } });

describe('the example rules, call by call', () => {
  it('the support assistant may http_get only *.corp.example (HTTP 403, MCP a tool error)', async () => {
    const ok = await request(KEYS.bob, '/tools/http_get/execute?wait=false', {
      json: { url: 'https://wiki.corp.example/page' },
    });
    expect(through(ok.status)).toBe(true);
    const denied = await request(KEYS.bob, '/tools/http_get/execute', {
      json: { url: 'https://evil.example/?x=.corp.example/' },
    });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toEqual({
      code: 'policy_denied',
      message: 'the support assistant may fetch only https://*.corp.example/ addresses',
      details: { policies: ['support-http-corp-only'] },
    });
    // Another assistant is not bound by the rule: the lists and scopes alone would allow both.
    const other = await request(KEYS.alice, '/tools/http_get/execute?wait=false', {
      json: { url: 'https://evil.example/' },
    });
    expect(through(other.status)).toBe(true);
    const result = await mcp(KEYS.bob, 'tools/call', {
      name: 'http_get',
      arguments: { url: 'https://evil.example/' },
    });
    expect(result.isError).toBe(true);
    expect(JSON.parse(result.content[0].text).error).toMatchObject({
      code: 'policy_denied',
      details: { policies: ['support-http-corp-only'] },
    });
    // The dialect bridge: the tool call's result is the refusal.
    const bridged = await request(KEYS.bob, '/v1/tool-calls', {
      json: {
        tool_calls: [
          {
            id: 'c1',
            type: 'function',
            function: { name: 'http_get', arguments: '{"url":"https://evil.example/"}' },
          },
        ],
      },
    });
    expect(JSON.stringify(bridged.body)).toContain('policy_denied');
    // The refusal is audited with the deciding policy.
    const audit = await request(KEYS.admin, '/v1/audit?client=support-assistant&limit=20');
    expect(audit.body).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          event: 'refused',
          status: 'policy_denied',
          policy: { decision: 'deny', policies: ['support-http-corp-only'] },
        }),
      ]),
    );
  });

  it("github__create_issue only in the user's team's repos, by the token's groups (an upstream tool)", async () => {
    const ann = await token('carol', 'ann', ['platform']);
    const own = await request(ann, '/tools/github__create_issue/execute', {
      json: { repo: 'platform/api', title: 'bug' },
    });
    expect(own.status).toBe(200);
    const record = await request(KEYS.admin, `/v1/calls/${own.body.id}`);
    expect(record.body.policy).toEqual({
      decision: 'allow',
      policies: expect.arrayContaining(['base-call']),
    });
    const other = await request(ann, '/tools/github__create_issue/execute', {
      json: { repo: 'payments/ledger', title: 'bug' },
    });
    expect(other.status).toBe(403);
    expect(other.body.error.details.policies).toEqual(['github-issues-own-team']);
    const ben = await token('carol', 'ben', ['payments']);
    expect(
      (
        await request(ben, '/tools/github__create_issue/execute', {
          json: { repo: 'payments/ledger', title: 'bug' },
        })
      ).status,
    ).toBe(200);
  });

  it('an upstream tool is decided by its upstream: listed and callable for carol only', async () => {
    const ann = await token('carol', 'ann', ['platform']);
    const denied = await request(KEYS.alice, '/tools/github__echo/execute', {
      json: { text: 'hi' },
    });
    expect(denied.status).toBe(403);
    expect(denied.body.error.details.policies).toEqual(['github-only-carol']);
    const names = (r: Answer) => (r.body as { name: string }[]).map((t) => t.name);
    expect(names(await request(KEYS.alice, '/tools'))).not.toContain('github__echo');
    expect(names(await request(KEYS.alice, '/tools'))).toContain('http_get');
    expect(names(await request(ann, '/tools'))).toContain('github__echo');
    const listed = await mcp(KEYS.alice, 'tools/list', {});
    expect(listed.tools.map((t: { name: string }) => t.name)).not.toContain('github__echo');
    const explained = await request(KEYS.alice, '/v1/policy/explain?tool=github__echo');
    expect(explained.body).toMatchObject({
      tool: 'github__echo',
      listed: false,
      policies: ['github-only-carol'],
    });
    // Forbidden for some arguments only: still listed.
    const support = await request(KEYS.bob, '/v1/policy/explain?tool=http_get');
    expect(support.body).toMatchObject({ listed: true });
  });

  it('file_delete: free in scratch/, parked for approval elsewhere; approving is the approve action', async () => {
    const scratch = await request(KEYS.alice, '/tools/file_delete/execute?wait=false', {
      json: { path: 'scratch/tmp.txt' },
    });
    expect(scratch).toMatchObject({ status: 202, body: { status: 'queued' } });
    const parked = await request(KEYS.alice, '/tools/file_delete/execute', {
      json: { path: 'report.txt' },
    });
    expect(parked).toMatchObject({ status: 202, body: { status: 'pending_approval' } });
    const id = parked.body.id as string;
    // The ops admin by API key is not in the ops group: the approve action is denied.
    const byKey = await request(KEYS.admin, `/v1/approvals/${id}/approve`, { method: 'POST' });
    expect(byKey.status).toBe(403);
    expect(byKey.body.error).toMatchObject({
      code: 'policy_denied',
      message: 'only the ops group approves file deletions',
    });
    const oli = await token('ops', 'oli', ['ops'], 'tools:all toolgate:admin');
    const approved = await request(oli, `/v1/approvals/${id}/approve`, { method: 'POST' });
    expect(approved.body).toMatchObject({ decision: 'approved', by: 'ops:oli' });
  });

  it('no run_shell from code mode: a nested call is denied, the same call made directly runs', async () => {
    const direct = await request(KEYS.alice, '/tools/run_shell/execute?wait=false', {
      json: { command: 'ls' },
    });
    expect(direct.status).toBe(202);
    const parent = await request(KEYS.alice, '/tools/current_time/execute', { json: {} });
    const capability = await new CodeModeCapabilities(redis, Keys.for(stack.config.redis)).mint(
      { clientId: 'assistant-a', parentCallId: parent.body.id },
      10,
      60,
    );
    const nested = await stack.call('/v1/code-mode/calls', {
      key: capability,
      json: { tool: 'run_shell', args: { command: 'ls' } },
    });
    expect(nested.status).toBe(403);
    expect((await nested.json()).error).toMatchObject({
      code: 'policy_denied',
      message: 'run_shell cannot be called from code mode',
    });
  });

  it('past 80 % of the sandbox time run_python needs approval; checks are for admins (POST /v1/policy/check)', async () => {
    const check = (body: unknown, key: string = KEYS.admin) =>
      request(key, '/v1/policy/check', { json: body });
    const python = (used: number) =>
      check({
        principal: { client: 'assistant-a', user: 'ann', groups: ['platform'] },
        tool: 'run_python',
        args: { code: 'print(1)' },
        context: { budget: { sandboxSeconds: { used, limit: 1000 } } },
      });
    expect((await python(799)).body).toMatchObject({ decision: 'allow', policies: ['run-python'] });
    expect((await python(800)).body).toMatchObject({
      decision: 'approval',
      policies: ['run-python-over-80'],
    });
    const shell = {
      principal: { client: 'assistant-a' },
      tool: 'run_shell',
      args: { command: 'ls' },
      context: { codeMode: { parentTool: 'run_code_with_tools' } },
    };
    expect((await check(shell)).body).toMatchObject({
      decision: 'deny',
      policies: ['no-shell-in-code-mode'],
      reason: 'run_shell cannot be called from code mode',
    });
    expect((await check(shell, KEYS.alice)).status).toBe(403);
    expect((await check({ principal: {}, tool: 'run_shell' })).body.error.code).toBe(
      'invalid_request',
    );
  });

  it('arguments past the bounds are refused with a code, never decided without them', async () => {
    // The tool's schema takes any number of fields: 300 pass it, not the policies' bound.
    const fields = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, 'v']));
    const big = await request(KEYS.alice, '/tools/note/execute', { json: { fields } });
    expect(big.status).toBe(413);
    expect(big.body.error.code).toBe('policy_context_too_large');
  });
});

describe('GET /v1/policy', () => {
  it('admins see the active set: hash, load time, each policy with its annotations and text', async () => {
    const ready = await (await fetch(`${stack.url}/readyz`)).json();
    const set = await request(KEYS.admin, '/v1/policy');
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ hash: ready.policy.hash, count: 14 });
    expect(Date.parse(set.body.loadedAt)).toBeLessThanOrEqual(Date.now());
    expect(set.body.lastError).toBeUndefined();
    expect(set.body.truncated).toBeUndefined();
    expect(set.body.policies).toHaveLength(14);
    expect(set.body.policies).toContainEqual({
      id: 'no-shell-in-code-mode',
      effect: 'forbid',
      file: 'code-mode.cedar',
      annotations: {
        id: 'no-shell-in-code-mode',
        reason: 'run_shell cannot be called from code mode',
      },
      text: expect.stringContaining('when { context.codeMode.nested };'),
    });
    expect((await request(KEYS.alice, '/v1/policy')).status).toBe(403);
  });
});

describe('code mode, sessions and traces', () => {
  it("a script's nested calls are decided with its token's groups: a group's forbid stops that user's, not another's", async () => {
    const ann = await token('carol', 'ann', ['contractors']);
    const ben = await token('carol', 'ben', ['platform']);
    const direct = await request(ann, '/tools/calculator/execute', { json: { expression: '1+1' } });
    expect(direct.status).toBe(403);
    const capabilities = new CodeModeCapabilities(redis, Keys.for(stack.config.redis));
    /** A nested calculator call of a script `credential` started, as its worker mints it. */
    const nested = async (credential: string, user: string, groups: string[]) => {
      const parent = await request(credential, '/tools/current_time/execute', { json: {} });
      const capability = await capabilities.mint(
        { clientId: 'carol', parentCallId: parent.body.id, user, scopes: ['tools:all'], groups },
        10,
        60,
      );
      const listed = await stack.call('/v1/code-mode/tools', { key: capability });
      const call = await stack.call('/v1/code-mode/calls', {
        key: capability,
        json: { tool: 'calculator', args: { expression: '6*7' } },
      });
      const { tools } = (await listed.json()) as { tools: { name: string }[] };
      return { tools: tools.map((t) => t.name), status: call.status, body: await call.json() };
    };
    const denied = await nested(ann, 'ann', ['contractors']);
    expect(denied.status).toBe(403);
    expect(denied.body.error).toEqual({
      code: 'policy_denied',
      message: 'contractors may not use the calculator',
      details: { policies: ['contractors-no-calculator'] },
    });
    expect(denied.tools).not.toContain('calculator');
    const allowed = await nested(ben, 'ben', ['platform']);
    expect(allowed).toMatchObject({ status: 200, body: { status: 'ok', result: 42 } });
    expect(allowed.tools).toContain('calculator');
  });

  it('a policy on context.session decides: run_shell is refused in a session, runs as a call of its own', async () => {
    // A live session host, as a sandbox worker's beat announces one (this stack runs no
    // sandbox): a session's calls queue for it, and the policies decide before that.
    const sessions = new SessionStore(
      redis,
      Keys.for(stack.config.redis),
      stack.config.worker.lostCallTimeoutMs,
    );
    await sessions.beat('cedar-test-host');
    const shell = await request(KEYS.alice, '/v1/sessions', { json: { tool: 'run_shell' } });
    expect(shell.status).toBe(201);
    const python = await request(KEYS.alice, '/v1/sessions', { json: { tool: 'run_python' } });
    expect(python.status).toBe(201);
    const inSession = (tool: string, args: unknown, session: string) =>
      stack.call(`/tools/${tool}/execute?wait=false`, {
        json: args,
        headers: { 'x-toolgate-session': session },
      });
    await sessions.beat('cedar-test-host');
    const refused = await inSession('run_shell', { command: 'ls' }, shell.body.id);
    expect(refused.status).toBe(403);
    expect((await refused.json()).error).toEqual({
      code: 'policy_denied',
      message: 'run_shell runs only as a call of its own, not in a session',
      details: { policies: ['no-shell-sessions'] },
    });
    const result = await mcp(KEYS.alice, 'tools/call', {
      name: 'run_shell',
      arguments: { command: 'ls' },
      _meta: { 'toolgate/session': shell.body.id },
    });
    expect(result.isError).toBe(true);
    expect(JSON.parse(result.content[0].text).error).toMatchObject({
      code: 'policy_denied',
      details: { policies: ['no-shell-sessions'] },
    });
    // The rule is on run_shell in a session only: a python session's call and a shell call
    // outside any session go on.
    expect((await inSession('run_python', { code: '1' }, python.body.id)).status).toBe(202);
    const alone = await request(KEYS.alice, '/tools/run_shell/execute?wait=false', {
      json: { command: 'ls' },
    });
    expect(alone.status).toBe(202);
    // The audit says which policy refused the session's call.
    const audit = await request(KEYS.admin, '/v1/audit?client=assistant-a&tool=run_shell&limit=20');
    expect(audit.body).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          status: 'policy_denied',
          policy: { decision: 'deny', policies: ['no-shell-sessions'] },
        }),
      ]),
    );
  });

  it("a call's gateway span carries the decision and the deciding policies", async () => {
    exporter.reset();
    const allowed = await request(KEYS.alice, '/tools/calculator/execute', {
      json: { expression: '2+2' },
    });
    expect(allowed.status).toBe(200);
    const denied = await request(KEYS.bob, '/tools/http_get/execute', {
      json: { url: 'https://evil.example/' },
    });
    expect(denied.status).toBe(403);
    const span = (tool: string, client: string) =>
      vi.waitFor(() => {
        const found = exporter
          .getFinishedSpans()
          .find(
            (s) =>
              s.name === 'toolgate.call' &&
              s.attributes['toolgate.tool'] === tool &&
              s.attributes['toolgate.client'] === client,
          );
        if (!found) throw new Error(`no toolgate.call span for ${tool} yet`);
        return found;
      }, 5000);
    expect((await span('calculator', 'assistant-a')).attributes).toMatchObject({
      'toolgate.policy.decision': 'allow',
      'toolgate.policy.ids': ['base-call'],
    });
    expect((await span('http_get', 'support-assistant')).attributes).toMatchObject({
      'toolgate.policy.decision': 'deny',
      'toolgate.policy.ids': ['support-http-corp-only'],
    });
  });
});

// The whole way, with a real sandbox: the script's call carries its token's groups to the
// worker (CallJob.groups), whose capability carries them to the gateway's nested calls.
const noCodeMode = await whyNoCodeMode();
if (noCodeMode) console.warn(`cedar code mode: skipped, ${noCodeMode}`);

describe.skipIf(noCodeMode !== undefined)("a script's nested calls, in a sandbox", () => {
  let codeMode: Awaited<ReturnType<typeof startCodeModeStack>> | undefined;
  beforeAll(async () => {
    codeMode = await startCodeModeStack({
      config: {
        clients: [{ id: 'carol', tools: ['*'] }],
        policy: {
          cedar: { policies, schema: join(dir, 'toolgate.cedarschema') },
          loopGuard: { maxCalls: 1000 },
        },
        auth: { oauth: oauth() },
      },
    });
  }, 120_000);
  afterAll(async () => {
    await codeMode?.close();
  });

  it("a contractor's script cannot reach the calculator; another user's can", async () => {
    const script = `print("calculator" in toolgate.tools())
try:
    print(toolgate.call("calculator", {"expression": "6*7"}))
except toolgate.ToolError as e:
    print(e.code, e.message)`;
    const run = async (credential: string) => {
      const res = await codeMode!.stack.call('/tools/run_code_with_tools/execute', {
        key: credential,
        json: { code: script },
      });
      return (await res.json()) as { status: string; result?: { stdout: string } };
    };
    const ann = await run(await token('carol', 'ann', ['contractors']));
    expect(ann).toMatchObject({ status: 'ok' });
    expect(ann.result!.stdout).toBe(
      'False\npolicy_denied contractors may not use the calculator\n',
    );
    const ben = await run(await token('carol', 'ben', ['platform']));
    expect(ben.result!.stdout.split('\n').slice(0, 1)).toEqual(['True']);
    expect(ben.result!.stdout).toContain('42');
  }, 90_000);
});

describe('without policy.cedar', () => {
  it('a gateway decides as before: explain says so, check is 404', async () => {
    const { cedar: _, ...policy } = stack.config.policy;
    const plain = createGateway({
      config: { ...stack.config, upstreams: [], policy },
      registry: createToolRegistry(tools),
      logger: createLogger('t', { level: 'silent' }),
    });
    const { port } = await plain.listen(0, '127.0.0.1');
    try {
      const base = `http://127.0.0.1:${port}`;
      const h = { authorization: `Bearer ${KEYS.bob}`, 'content-type': 'application/json' };
      const call = await fetch(`${base}/tools/http_get/execute?wait=false`, {
        method: 'POST',
        headers: h,
        body: JSON.stringify({ url: 'https://evil.example/' }),
      });
      expect(call.status).toBe(202);
      const explain = await fetch(`${base}/v1/policy/explain?tool=http_get`, { headers: h });
      expect(await explain.json()).toMatchObject({ listed: true, policies: [] });
      const admin = { authorization: `Bearer ${KEYS.admin}` };
      const set = await fetch(`${base}/v1/policy`, { headers: admin });
      expect(set.status).toBe(404);
      expect((await set.json()).error.code).toBe('not_found');
    } finally {
      await plain.close();
    }
  });
});

describe('bad policy files', () => {
  it('a gateway does not start on a file that is not Cedar, and says which', () => {
    const bad = mkdtempSync(join(tmpdir(), 'tg-cedar-bad-'));
    try {
      writeFileSync(join(bad, 'broken.cedar'), 'permit(principal, action, resource) when { nope');
      expect(() =>
        createGateway({
          config: {
            ...stack.config,
            upstreams: [],
            policy: {
              ...stack.config.policy,
              cedar: {
                policies: bad,
                schema: join(dir, 'toolgate.cedarschema'),
                groupsClaim: 'groups',
              },
            },
          },
          registry: createToolRegistry(tools),
          logger: createLogger('t', { level: 'silent' }),
        }),
      ).toThrow(/broken\.cedar: line 1/);
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
  });

  it('a broken file on reload is refused: the last good set keeps deciding and /readyz says so', async () => {
    const ready = async () => (await (await fetch(`${stack.url}/readyz`)).json()).policy;
    const before = await ready();
    expect(before).toMatchObject({ hash: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect(before.reloadFailed).toBeUndefined();
    writeFileSync(join(policies, 'zz-broken.cedar'), 'forbid(principal, action, resource) when {');
    let now = await ready();
    for (let i = 0; i < 100 && !now.reloadFailed; i++) {
      await new Promise((r) => setTimeout(r, 50));
      now = await ready();
    }
    expect(now).toMatchObject({ hash: before.hash, reloadFailed: true });
    const shown = (await request(KEYS.admin, '/v1/policy')).body;
    expect(shown).toMatchObject({ hash: before.hash, lastError: expect.stringMatching(/invalid/) });
    expect(shown.lastError).not.toContain('forbid(');
    const metrics = await (await fetch(stack.metricsUrl)).text();
    expect(metrics).toMatch(/toolgate_policy_reload_failures_total\{[^}]*\} [1-9]/);
    expect(metrics).toContain(`hash="${before.hash}"`);
    // Still deciding with the good set.
    const denied = await request(KEYS.bob, '/tools/http_get/execute', {
      json: { url: 'https://evil.example/' },
    });
    expect(denied.status).toBe(403);
    unlinkSync(join(policies, 'zz-broken.cedar'));
    for (let i = 0; i < 100 && now.reloadFailed; i++) {
      await new Promise((r) => setTimeout(r, 50));
      now = await ready();
    }
    expect(now.reloadFailed).toBeUndefined();
    expect(now.hash).toBe(before.hash);
  });
});
