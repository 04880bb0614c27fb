/**
 * Spend budgets (issue 30, docs/budgets.md) through the real gateway, worker, Redis, an upstream
 * MCP server of our own and the docker sandbox: a client or user that spent its window's budget
 * is refused at admission (429 budget_exhausted, Retry-After to the reset) while the others keep
 * calling; what each call used is charged when it ends.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, parseConfig } from '@toolgate/config';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAuthServer, type AuthServer } from './support/auth-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { startTestUpstream, type TestUpstream } from './support/test-upstream.js';
import { testTools } from './support/tools.js';

const UPPY = 'uppy-key-0123456789abcdef';
const SANDY = 'sandy-key-0123456789abcdef';
const WEBBY = 'webby-key-0123456789abcdef';
/** What the local web server answers: 150 bytes of body. */
const PAGE = 'x'.repeat(150);
const CAROL = { client_id: 'carol', client_secret: 'carol-secret-0123456789', scope: 'tools:all' };
const SCOPE = 'tools:all';

const sandboxReason = await whyDriverUnavailable('docker');
if (sandboxReason) console.warn(`budgets: sandbox seconds skipped, ${sandboxReason}`);

let stack: Stack;
let as: AuthServer;
let upstream: TestUpstream;
let web: HttpServer;
let webUrl: string;
let sandbox: Sandbox | undefined;
let dir: string | undefined;
let audience: string;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  const port = await freePort();
  audience = `http://127.0.0.1:${port}/mcp`;
  as = await startAuthServer({ audience, scopes: [SCOPE], clients: [CAROL] });
  upstream = await startTestUpstream();
  web = createHttpServer((_req, res) =>
    res.writeHead(200, { 'content-type': 'text/plain' }).end(PAGE),
  );
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve));
  webUrl = `http://127.0.0.1:${(web.address() as { port: number }).port}`;
  if (!sandboxReason) {
    dir = mkdtempSync(join(tmpdir(), 'toolgate-budgets-'));
    sandbox = await createSandbox(testSandboxConfig('docker', dir));
    await sandbox.warmUp(60_000);
  }
  stack = await startStack({
    port,
    tools: testTools,
    ...(sandbox ? { services: { sandbox, workspaces: createWorkspaces(sandbox.config) } } : {}),
    config: {
      // The upstream of our own listens on loopback.
      policy: { http: { allowHosts: ['127.0.0.1'] } },
      clients: [
        {
          id: 'alice',
          key: KEYS.alice,
          tools: ['*'],
          limits: { budget: { calls: { day: 3, month: 100 } } },
        },
        { id: 'bob', key: KEYS.bob, tools: ['current_time', 'category:math'] },
        { id: 'uppy', key: UPPY, tools: ['*'], limits: { budget: { upstreamCalls: { day: 2 } } } },
        {
          id: 'webby',
          key: WEBBY,
          tools: ['*'],
          limits: { budget: { egressBytes: { day: 200 } } },
        },
        {
          id: 'sandy',
          key: SANDY,
          tools: ['*'],
          limits: { budget: { sandboxSeconds: { day: 1 } } },
        },
        {
          id: 'carol',
          tools: ['*'],
          limits: {
            budget: { calls: { month: 1000 } },
            perUser: { budget: { calls: { day: 2 } } },
          },
        },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      upstreams: [{ id: 'test', url: upstream.url, trust: 'auto' }],
      auth: { oauth: { issuer: as.issuer, audience, scopes: { [SCOPE]: ['*'] } } },
    },
  });
}, 120_000);

afterAll(async () => {
  await stack?.close();
  await sandbox?.close();
  await upstream?.close();
  await new Promise((resolve) => web?.close(resolve));
  await as?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The next UTC midnight, epoch ms. */
function nextMidnight(): number {
  const d = new Date();
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
}

const execute = (tool: string, args: unknown, key: string) =>
  stack.call(`/tools/${tool}/execute`, { json: args, key });

interface Refusal {
  error: {
    code: string;
    details: {
      metric: string;
      window: string;
      scope: string;
      used: number;
      limit: number;
      resetsAt: string;
    };
  };
}

describe('budgets exhausted for one client while another keeps calling', () => {
  it("refuses alice's fourth call of the day with 429 budget_exhausted; bob is not affected", async () => {
    const remaining: (string | null)[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await execute('calculator', { expression: '1+1' }, KEYS.alice);
      expect(res.status).toBe(200);
      remaining.push(res.headers.get('toolgate-budget-remaining'));
      // bob, without a budget, calls in between and never gets a budget header.
      const bobs = await execute('calculator', { expression: '2+2' }, KEYS.bob);
      expect(bobs.status).toBe(200);
      expect(bobs.headers.get('toolgate-budget-remaining')).toBeNull();
    }
    expect(remaining).toEqual([
      'calls=3;window=day;scope=client',
      'calls=2;window=day;scope=client',
      'calls=1;window=day;scope=client',
    ]);

    const refused = await execute('calculator', { expression: '1+1' }, KEYS.alice);
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as Refusal;
    expect(body.error.code).toBe('budget_exhausted');
    expect(body.error.details).toMatchObject({
      metric: 'calls',
      window: 'day',
      scope: 'client',
      used: 3,
      limit: 3,
      resetsAt: new Date(nextMidnight()).toISOString(),
    });
    const retryAfter = Number(refused.headers.get('retry-after'));
    const expected = (nextMidnight() - Date.now()) / 1000;
    expect(Math.abs(retryAfter - expected)).toBeLessThan(60);

    // Bob keeps calling after alice is refused.
    for (let i = 0; i < 3; i++) {
      expect((await execute('calculator', { expression: '3+3' }, KEYS.bob)).status).toBe(200);
    }
    // The refused call was not charged (it never ran): still 3 of 3.
    const own = (await (await stack.call('/v1/budget', { key: KEYS.alice })).json()) as {
      client: string;
      budget: { calls: { window: string; used: number; limit: number; remaining: number }[] };
    };
    expect(own.client).toBe('alice');
    expect(own.budget.calls).toEqual([
      expect.objectContaining({ window: 'day', used: 3, limit: 3, remaining: 0 }),
      expect.objectContaining({ window: 'month', used: 3, limit: 100, remaining: 97 }),
    ]);
  });

  it('answers an exhausted budget over MCP as a tool error with the same code', async () => {
    const res = await fetch(`${stack.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEYS.alice}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'calculator', arguments: { expression: '1+1' } },
      }),
    });
    const text = await res.text();
    const json = text.trimStart().startsWith('{') ? text : /^data: (.*)$/m.exec(text)![1]!;
    const { result } = JSON.parse(json) as {
      result: { isError?: boolean; structuredContent?: unknown; content: { text: string }[] };
    };
    expect(result.isError).toBe(true);
    expect(JSON.stringify(result)).toContain('budget_exhausted');
  });
});

describe("a user's budget within its client", () => {
  it("refuses ann's third call of the day while ben, of the same client, keeps calling", async () => {
    const ann = (await as.userToken(CAROL, 'ann', SCOPE, audience)).access_token;
    const ben = (await as.userToken(CAROL, 'ben', SCOPE, audience)).access_token;
    for (let i = 0; i < 2; i++) {
      expect((await execute('calculator', { expression: '1' }, ann)).status).toBe(200);
    }
    const refused = await execute('calculator', { expression: '1' }, ann);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as Refusal).error.details).toMatchObject({
      metric: 'calls',
      scope: 'user',
      used: 2,
      limit: 2,
    });
    const bens = await execute('calculator', { expression: '1' }, ben);
    expect(bens.status).toBe(200);
    expect(bens.headers.get('toolgate-budget-remaining')).toBe('calls=2;window=day;scope=user');

    // ann sees her own use and her client's; the client's month counts every user's calls.
    const view = (await (await stack.call('/v1/budget', { key: ann })).json()) as {
      client: string;
      budget: { calls: { used: number }[] };
      user: { id: string; budget: { calls: { used: number; limit: number }[] } };
    };
    expect(view.client).toBe('carol');
    expect(view.budget.calls[0]!.used).toBe(3);
    expect(view.user).toMatchObject({ id: 'ann', budget: { calls: [{ used: 2, limit: 2 }] } });
  });
});

describe('upstream calls', () => {
  it('counts each call of an upstream tool and refuses upstream tools only, once spent', async () => {
    // The gateway reads the upstream's catalog once it is up.
    await expect
      .poll(async () => JSON.stringify(await (await stack.call('/tools', { key: UPPY })).json()), {
        timeout: 15_000,
      })
      .toContain('test__echo');
    for (let i = 0; i < 2; i++) {
      const res = await execute('test__echo', { text: `hi ${i}` }, UPPY);
      expect(await res.json()).toMatchObject({ status: 'ok', result: `echo: hi ${i}` });
    }
    const refused = await execute('test__echo', { text: 'again' }, UPPY);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as Refusal).error.details).toMatchObject({
      metric: 'upstreamCalls',
      used: 2,
      limit: 2,
    });
    // Its budget names upstream calls only: built-in tools still run.
    expect((await execute('calculator', { expression: '1' }, UPPY)).status).toBe(200);
  });
});

describe('egress bytes', () => {
  it("charges an http tool's body bytes and refuses http tools once the day's bytes are spent", async () => {
    // 150 bytes of 200: the next call is still admitted (and overruns, within the stated bound).
    for (const path of ['/a', '/b']) {
      const res = await execute('http_get', { url: `${webUrl}${path}` }, WEBBY);
      expect(await res.json()).toMatchObject({ status: 'ok', result: { bytes: 150 } });
    }
    const refused = await execute('http_get', { url: `${webUrl}/c` }, WEBBY);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as Refusal).error.details).toMatchObject({
      metric: 'egressBytes',
      used: 300,
      limit: 200,
    });
    expect((await execute('calculator', { expression: '1' }, WEBBY)).status).toBe(200);
  });
});

describe.skipIf(sandboxReason !== undefined)('sandbox seconds (docker)', () => {
  it("charges a sandboxed run's wall time and refuses sandboxed tools once the day's second is spent", async () => {
    const first = await execute(
      'run_python',
      { code: 'import time; time.sleep(1.2); print("done")' },
      SANDY,
    );
    expect(await first.json()).toMatchObject({ status: 'ok' });
    const view = (await (await stack.call('/v1/budget', { key: SANDY })).json()) as {
      budget: { sandboxSeconds: { used: number; limit: number }[] };
    };
    // At least the 1.2 s slept, rounded up to whole seconds; well under the call's timeout.
    expect(view.budget.sandboxSeconds[0]!.used).toBeGreaterThanOrEqual(2);
    expect(view.budget.sandboxSeconds[0]!.used).toBeLessThan(30);
    const refused = await execute('run_python', { code: 'print(1)' }, SANDY);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as Refusal).error.details.metric).toBe('sandboxSeconds');
    expect((await execute('calculator', { expression: '1' }, SANDY)).status).toBe(200);
  }, 60_000);
});

describe('GET /v1/budget and metrics', () => {
  it('shows a client without a budget an empty one, refuses it another client, and shows admins all', async () => {
    const bobs = await stack.call('/v1/budget', { key: KEYS.bob });
    expect(await bobs.json()).toEqual({ client: 'bob', budget: {} });
    expect((await stack.call('/v1/budget?client=alice', { key: KEYS.bob })).status).toBe(403);

    const all = (await (await stack.call('/v1/budget', { key: KEYS.admin })).json()) as {
      clients: { client: string }[];
    };
    expect(all.clients.map((c) => c.client).sort()).toEqual([
      'alice',
      'carol',
      'sandy',
      'uppy',
      'webby',
    ]);
    const one = (await (
      await stack.call('/v1/budget?client=alice', { key: KEYS.admin })
    ).json()) as {
      client: string;
      budget: { calls: { used: number }[] };
    };
    expect(one).toMatchObject({ client: 'alice', budget: { calls: [{ used: 3 }, { used: 3 }] } });
    expect((await stack.call('/v1/budget?client=nobody', { key: KEYS.admin })).status).toBe(400);
  });

  it('exports use and limit per client, metric and window', async () => {
    const text = await (await fetch(stack.metricsUrl)).text();
    expect(text).toMatch(
      /toolgate_budget_used\{[^}]*client="alice",metric="calls",window="day"[^}]*\} 3/,
    );
    expect(text).toMatch(
      /toolgate_budget_limit\{[^}]*client="alice",metric="calls",window="day"[^}]*\} 3/,
    );
    expect(text).toMatch(
      /toolgate_budget_used\{[^}]*client="uppy",metric="upstream_calls",window="day"[^}]*\} 2/,
    );
    expect(text).not.toMatch(/toolgate_budget_used\{[^}]*client="bob"/);
  });
});

describe('bad budget config', () => {
  const load = (budget: unknown) => () =>
    parseConfig({ clients: [{ id: 'a', key: KEYS.alice, limits: { budget } }] }, {});
  const field = (budget: unknown): string => {
    try {
      load(budget)();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return `${(err as ConfigError).field}: ${(err as Error).message}`;
    }
    throw new Error('the config loaded');
  };

  it('names the field of a negative limit, an unknown metric, an unknown window, an empty metric', () => {
    expect(field({ calls: { day: -1 } })).toMatch(/^\/clients\/0\/limits\/budget\/calls\/day/);
    expect(field({ tokens: { day: 5 } })).toMatch(/\/clients\/0\/limits\/budget.*tokens/);
    expect(field({ calls: { week: 5 } })).toMatch(/\/clients\/0\/limits\/budget\/calls.*week/);
    expect(field({ calls: {} })).toMatch(/\/clients\/0\/limits\/budget\/calls/);
    expect(field({ calls: { day: 1.5 } })).toMatch(/\/clients\/0\/limits\/budget\/calls\/day/);
    expect(() =>
      parseConfig(
        {
          clients: [
            {
              id: 'a',
              key: KEYS.alice,
              limits: { perUser: { budget: { egressBytes: { month: 'lots' } } } },
            },
          ],
        },
        {},
      ),
    ).toThrow(/perUser\/budget\/egressBytes\/month/);
  });
});
