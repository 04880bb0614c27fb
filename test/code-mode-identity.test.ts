/**
 * Code mode keeps its caller's identity (issues 22 × 23): a script started with an OAuth token
 * (real oidc-provider tokens, authorization code with PKCE) makes its nested calls with that
 * token's grant and user, never as the bare client: its scopes bound the `toolgate` module and
 * each nested call, `isolation: user` puts its files in the user's workspace, and the audit of
 * a nested call names the user.
 */
import { randomUUID } from 'node:crypto';
import { CodeModeCapabilities, Keys } from '@toolgate/calls';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAuthServer, type AuthServer } from './support/auth-server.js';
import { startCodeModeStack, whyNoCodeMode } from './support/code-mode-stack.js';
import { freePort, startRedisServer, type RedisServer } from './support/redis-server.js';
import { KEYS, type Stack } from './support/stack.js';

/** Allows code mode and the calculator only: no `file_*`. */
const CALC = 'tools:calc';
const ALL = 'tools:all';
const CAROL = {
  client_id: 'carol',
  client_secret: 'carol-secret-0123456789',
  scope: `${CALC} ${ALL}`,
};
/** carol's API key: its scripts act as the whole client, in the client's workspace. */
const CAROL_KEY = 'carol-key-0123456789abcdef';

interface Outcome {
  id: string;
  status: string;
  result?: { stdout: string; stderr: string; exitCode: number };
  error?: { code: string; message: string };
}

const reason = await whyNoCodeMode();
if (reason) console.warn(`code-mode identity: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('code mode keeps the caller identity', () => {
  let as: AuthServer;
  let stack: Stack;
  let close: () => Promise<void>;
  let audience: string;

  /** A token for `user` through carol, with `scope` (authorization code with PKCE). */
  async function signIn(user: string, scope: string): Promise<string> {
    return (await as.userToken(CAROL, user, scope, audience)).access_token;
  }

  const run = async (key: string, code: string) =>
    (await (
      await stack.call('/tools/run_code_with_tools/execute', { json: { code }, key })
    ).json()) as Outcome;

  beforeAll(async () => {
    const port = await freePort();
    audience = `http://127.0.0.1:${port}/mcp`;
    as = await startAuthServer({ audience, scopes: [CALC, ALL], clients: [CAROL] });
    ({ stack, close } = await startCodeModeStack({
      port,
      config: {
        clients: [
          { id: 'carol', key: CAROL_KEY, tools: ['*'], isolation: 'user' },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
        ],
        policy: { loopGuard: { maxCalls: 1000 } },
        auth: {
          oauth: {
            issuer: as.issuer,
            audience,
            scopes: { [CALC]: ['run_code_with_tools', 'calculator'], [ALL]: ['*'] },
          },
        },
      },
    }));
  }, 120_000);
  afterAll(async () => {
    await close?.();
    await as?.close();
  });

  it("a token's scopes bound its script: the module lacks file_read and a nested file_read is the step-up 403", async () => {
    const token = await signIn('lee', CALC);
    const out = await run(
      token,
      `print(toolgate.tools())
print(hasattr(toolgate, "file_read"))
try:
    toolgate.call("file_read", {"path": "notes.txt"})
except toolgate.ToolError as e:
    print(e.code)
    print(e.message)
print(toolgate.calculator(expression="6*7"))`,
    );
    expect(out).toMatchObject({ status: 'ok', result: { exitCode: 0 } });
    const lines = out.result!.stdout.trim().split('\n');
    expect(lines.slice(0, 4)).toEqual([
      "['calculator']",
      'False',
      'insufficient_scope',
      `the token's scopes do not cover "file_read"; sign in again with scope "${ALL}"`,
    ]);
    expect(lines[4]).toContain('42');
    // The same client's API key still gets every tool of the client in its scripts.
    const keyed = await run(CAROL_KEY, 'print("file_read" in toolgate.tools())');
    expect(keyed.result!.stdout).toBe('True\n');
  }, 60_000);

  it("a user's script under isolation: user writes nested into the user's workspace, and the audit names the user", async () => {
    const ann = await signIn('ann', ALL);
    const out = await run(
      ann,
      'toolgate.file_write(path="from-script.txt", content="written by ann\'s script")\nprint("done")',
    );
    expect(out).toMatchObject({ status: 'ok', result: { stdout: 'done\n', exitCode: 0 } });
    // ann reads it back in her own workspace…
    const own = await stack.call('/tools/file_read/execute', {
      json: { path: 'from-script.txt' },
      key: ann,
    });
    expect(await own.json()).toMatchObject({
      status: 'ok',
      result: { content: "written by ann's script" },
    });
    // …and it is not in the client's workspace, nor in another user's.
    const client = await stack.call('/tools/file_read/execute', {
      json: { path: 'from-script.txt' },
      key: CAROL_KEY,
    });
    expect(await client.json()).toMatchObject({ status: 'error' });
    const ben = await signIn('ben', ALL);
    const other = await stack.call('/tools/file_read/execute', {
      json: { path: 'from-script.txt' },
      key: ben,
    });
    expect(await other.json()).toMatchObject({ status: 'error' });

    const deadline = Date.now() + 20_000;
    let entry: { user?: string; parentCallId?: string; status: string } | undefined;
    while (!entry && Date.now() < deadline) {
      const entries = (await (
        await stack.call('/v1/audit?client=carol&tool=file_write&limit=50', { key: KEYS.admin })
      ).json()) as { user?: string; parentCallId?: string; status: string }[];
      entry = entries.find((e) => e.parentCallId === out.id);
      if (!entry) await new Promise((r) => setTimeout(r, 100));
    }
    expect(entry).toMatchObject({ user: 'ann', status: 'ok' });
  }, 90_000);
});

describe('a capability carries its caller', () => {
  let server: RedisServer;
  let redis: Redis;
  let capabilities: CodeModeCapabilities;
  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.port, '127.0.0.1');
    capabilities = new CodeModeCapabilities(redis, new Keys(`cmid-${randomUUID()}`));
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it('user, scopes and groups come back from peek and take; an API key has none', async () => {
    const grant = {
      clientId: 'carol',
      parentCallId: 'p1',
      user: 'ann',
      scopes: [CALC],
      groups: ['platform', 'on-call'],
    };
    const token = await capabilities.mint(grant, 2, 60);
    expect(await capabilities.peek(token)).toEqual(grant);
    expect(await capabilities.take(token)).toEqual({ ok: true, grant, remaining: 1 });
    // A token without scopes configured still differs from an API key: [] is kept.
    const none = await capabilities.mint({ ...grant, scopes: [] }, 1, 60);
    expect(await capabilities.peek(none)).toEqual({ ...grant, scopes: [] });
    const keyed = await capabilities.mint({ clientId: 'carol', parentCallId: 'p2' }, 1, 60);
    expect(await capabilities.take(keyed)).toMatchObject({
      ok: true,
      grant: { clientId: 'carol', parentCallId: 'p2' },
    });
    expect(await capabilities.peek(keyed)).toEqual({ clientId: 'carol', parentCallId: 'p2' });
  });

  it('the identity fields are bounded: a 257-character user, over 4096 bytes of scopes or 256 groups are refused', async () => {
    const base = { clientId: 'carol', parentCallId: 'p3' };
    await expect(capabilities.mint({ ...base, user: 'u'.repeat(257) }, 1, 60)).rejects.toThrow(
      /at most 256 characters/,
    );
    await expect(
      capabilities.mint(
        { ...base, scopes: Array.from({ length: 64 }, (_, i) => `scope-${i}-`.padEnd(64, 'x')) },
        1,
        60,
      ),
    ).rejects.toThrow(/at most 4096 bytes/);
    // The groups claim's own bounds (a token past them is refused): never a cut list.
    const groups = (n: number, length = 8) =>
      Array.from({ length: n }, (_, i) => `g${i}`.padEnd(length, 'x'));
    await expect(capabilities.mint({ ...base, groups: groups(257) }, 1, 60)).rejects.toThrow(
      /at most 256 names/,
    );
    await expect(capabilities.mint({ ...base, groups: groups(1, 257) }, 1, 60)).rejects.toThrow(
      /at most 256 names of at most 256 characters/,
    );
    const most = await capabilities.mint({ ...base, groups: groups(256, 256) }, 1, 60);
    expect((await capabilities.peek(most))?.groups).toHaveLength(256);
    expect(await capabilities.mint({ ...base, user: 'u'.repeat(256) }, 1, 60)).toMatch(/^tgcm_/);
  });
});
