import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createSandbox, createWorkspaces, type DriverName, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

// The sessions leftovers (docs/sessions.md): rich outputs of a Python session's call
// (matplotlib figures, display()), the bridge's session per conversation, and the admin's view
// of every client's sessions. Real gateway, worker, Redis and sandbox.

const PNG_SIGNATURE = '89504e470d0a1a0a';

interface Attachment {
  mimeType: string;
  encoding: string;
  data: string;
  bytes: number;
}
interface Body {
  status: string;
  result: {
    stdout: string;
    stderr: string;
    exitCode: number;
    attachments?: Attachment[];
    attachmentsOmitted?: { mimeType: string; bytes: number; code: string }[];
  };
  error: { code: string; message: string };
}

const clients = [
  { id: 'alice', key: KEYS.alice, tools: ['*'], limits: { sessions: 3 } },
  { id: 'bob', key: KEYS.bob, tools: ['*'], limits: { sessions: 3 } },
  // A client that may not run code: the bridge makes it no session.
  { id: 'carol', key: 'carol-key-0123456789abcdef', tools: ['current_time'] },
  { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
];

async function stackWith(driver: DriverName, config: Record<string, unknown> = {}) {
  const dir = mkdtempSync(join(tmpdir(), `toolgate-session-rich-${driver}-`));
  // bwrap's uid in the sandbox must reach the workspaces below it.
  chmodSync(dir, 0o711);
  const sandbox: Sandbox = await createSandbox(testSandboxConfig(driver, dir));
  const stack: Stack = await startStack({
    services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
    config: { clients, ...config },
  });
  return {
    stack,
    async close() {
      await stack.close();
      await sandbox.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const drivers: { driver: DriverName; reason: string | undefined }[] = [];
for (const driver of ['docker', 'bwrap'] as DriverName[]) {
  const reason = await whyDriverUnavailable(driver);
  if (reason) console.warn(`session rich outputs (${driver}): skipped, ${reason}`);
  drivers.push({ driver, reason });
}

for (const { driver, reason } of drivers) {
  describe.skipIf(reason !== undefined)(`session rich outputs (${driver})`, () => {
    let env: Awaited<ReturnType<typeof stackWith>>;
    beforeAll(async () => {
      env = await stackWith(driver);
    }, 120_000);
    afterAll(() => env?.close());

    const open = async () => {
      const res = await env.stack.call('/v1/sessions', { json: { tool: 'run_python' } });
      expect(res.status).toBe(201);
      return ((await res.json()) as { id: string }).id;
    };
    const run = async (session: string, code: string) => {
      const res = await env.stack.call('/tools/run_python/execute', {
        json: { code },
        headers: { 'x-toolgate-session': session },
      });
      const body = (await res.json()) as Body;
      expect(body, JSON.stringify(body).slice(0, 2000)).toMatchObject({ status: 'ok' });
      return body.result;
    };

    it('a matplotlib figure comes back as an image/png attachment, display() as text/plain', async () => {
      const s = await open();
      const result = await run(
        s,
        [
          'import matplotlib.pyplot as plt',
          'plt.plot([1, 4, 9])',
          'plt.title("squares")',
          'plt.show()',
          'print("drawn")',
          'display("a note", {"n": 3})',
          // Left open: sent at the end of the call, as a notebook cell's.
          'plt.figure(); plt.bar(["a", "b"], [2, 5])',
        ].join('\n'),
      );
      expect(result.stdout).toContain('drawn\n');
      expect(result.stderr).toBe('');
      const attachments = result.attachments!;
      expect(attachments.map((a) => a.mimeType)).toEqual([
        'image/png',
        'text/plain',
        'text/plain',
        'image/png',
      ]);
      for (const image of [attachments[0]!, attachments[3]!]) {
        const png = Buffer.from(image.data, 'base64');
        expect(image.encoding).toBe('base64');
        expect(png.subarray(0, 8).toString('hex')).toBe(PNG_SIGNATURE);
        expect(image.bytes).toBe(png.length);
      }
      expect(attachments[1]).toEqual({
        mimeType: 'text/plain',
        encoding: 'utf-8',
        data: 'a note',
        bytes: 6,
      });
      expect(attachments[2]!.data).toBe("{'n': 3}");
      // Shown figures are closed: the next call sends none again, and the state is kept.
      const next = await run(s, 'len(plt.get_fignums())');
      expect(next.stdout).toBe('0\n');
      expect(next.attachments).toBeUndefined();
      // The kernel's backend is its own: a child process draws with matplotlib's usual one.
      const child = await run(
        s,
        [
          'import subprocess, sys',
          'r = subprocess.run([sys.executable, "-c", "import matplotlib.pyplot as p; p.plot([1]); p.savefig(\'/tmp/c.png\'); print(p.get_backend())"], capture_output=True, text=True)',
          'print(r.returncode, r.stdout.strip(), r.stderr)',
        ].join('\n'),
      );
      expect(child.stdout).toBe('0 agg \n');
      await env.stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });

    it('over MCP a figure is an image content block; the text a model reads has no base64', async () => {
      const s = await open();
      const client = new Client({ name: 'toolgate-test', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${env.stack.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${KEYS.alice}` } },
        }),
      );
      try {
        const result = await client.callTool({
          name: 'run_python',
          arguments: { code: 'import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])' },
          _meta: { 'toolgate/session': s },
        });
        expect(result.isError).toBeFalsy();
        const content = result.content as { type: string; text?: string; data?: string }[];
        const images = content.filter((c) => c.type === 'image');
        expect(images).toHaveLength(1);
        expect(images[0]).toMatchObject({ mimeType: 'image/png' });
        expect(Buffer.from(images[0]!.data!, 'base64').subarray(0, 8).toString('hex')).toBe(
          PNG_SIGNATURE,
        );
        const text = content.find((c) => c.type === 'text')!.text!;
        expect(JSON.parse(text).attachments).toEqual([
          { mimeType: 'image/png', bytes: expect.any(Number) as number },
        ]);
        expect(text).not.toContain(images[0]!.data!.slice(0, 64));
        // The bridge's text is the same: the model reads that an image came, not its bytes.
        const bridged = (await (
          await env.stack.call('/v1/tool-calls', {
            json: {
              role: 'assistant',
              tool_calls: [
                {
                  id: 'call_fig',
                  type: 'function',
                  function: {
                    name: 'run_python',
                    arguments: JSON.stringify({ code: 'plt.plot([1, 2])' }),
                  },
                },
              ],
            },
            headers: { 'x-toolgate-session': s },
          })
        ).json()) as { messages: { content: string }[] };
        const said = JSON.parse(bridged.messages[0]!.content) as Body['result'];
        expect(said.attachments).toEqual([
          { mimeType: 'image/png', bytes: expect.any(Number) as number },
        ]);
      } finally {
        await client.close();
        await env.stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
      }
    });

    it('attachments are bounded in count and size, with stable codes; forged frames too', async () => {
      const s = await open();
      const many = await run(
        s,
        'import matplotlib.pyplot as plt\nfor i in range(10):\n    plt.figure(); plt.plot([i, 0])',
      );
      expect(many.attachments, JSON.stringify(many).slice(0, 3000)).toHaveLength(4);
      // The first 4 refused ones are listed: a flood of figures stays a short result.
      expect(many.attachmentsOmitted).toEqual(
        Array.from({ length: 4 }, () => ({
          mimeType: 'image/png',
          bytes: expect.any(Number) as number,
          code: 'too_many_attachments',
        })),
      );
      expect(many.stderr).toContain('too_many_attachments (at most 4 per call)');

      // An object whose PNG is over 1 MiB: the kernel sends only that it was too large.
      const big = await run(
        s,
        'class Big:\n    def _repr_png_(self):\n        return b"\\x89PNG" + bytes(2 * 1024 * 1024)\ndisplay(Big())',
      );
      expect(big.attachments).toBeUndefined();
      expect(big.attachmentsOmitted).toEqual([
        { mimeType: 'image/png', bytes: 2 * 1024 * 1024 + 4, code: 'attachment_too_large' },
      ]);

      // Code in the session can find the kernel's token and write a frame itself: the worker
      // drops one past the bound (an image of ~3 MiB) without keeping it, and says so.
      const forged = await run(
        s,
        [
          'import os, sys',
          'tok = sys.modules["__main__"].TOKEN',
          'os.write(1, ("\\x1e" + tok + \'{"t":"display","mime":"image/png","data":"\' + "A" * (4 * 1024 * 1024) + \'"}\\n\').encode())',
          'print("after")',
        ].join('\n'),
      );
      expect(forged.stdout).toContain('after');
      expect(forged.attachments).toBeUndefined();
      expect(forged.attachmentsOmitted).toMatchObject([
        { mimeType: 'image/png', code: 'attachment_too_large' },
      ]);
      // The session goes on.
      expect((await run(s, '6 * 7')).stdout).toBe('42\n');
      await env.stack.call(`/v1/sessions/${s}`, { method: 'DELETE' });
    });
  });
}

const first = drivers.find((d) => d.reason === undefined);

describe.skipIf(!first)('the bridge: a session per conversation', () => {
  let env: Awaited<ReturnType<typeof stackWith>>;
  beforeAll(async () => {
    env = await stackWith(first!.driver, { sessions: { perConversation: false } });
  }, 120_000);
  afterAll(() => env?.close());

  const message = (id: string, ...codes: string[]) => ({
    role: 'assistant',
    tool_calls: codes.map((code, i) => ({
      id: `${id}_${i}`,
      type: 'function',
      function: { name: 'run_python', arguments: JSON.stringify({ code }) },
    })),
  });
  const send = async (
    conversation: string | undefined,
    body: unknown,
    o: { key?: string; session?: string } = {},
  ) => {
    const res = await env.stack.call('/v1/tool-calls', {
      json: body,
      key: o.key ?? KEYS.alice,
      headers: {
        ...(conversation ? { 'x-conversation-id': conversation } : {}),
        'x-toolgate-session': o.session ?? 'conversation',
      },
    });
    return { status: res.status, body: (await res.json()) as { messages: { content: string }[] } };
  };
  const list = async (key = KEYS.alice) =>
    (
      (await (await env.stack.call('/v1/sessions', { key })).json()) as {
        sessions: { id: string }[];
      }
    ).sessions;

  it('the first call of a conversation creates its session, later calls use it', async () => {
    const first = await send('conv-a', message('m1', 'x = 40'));
    expect(first.status).toBe(200);
    expect(await list()).toHaveLength(1);
    const later = await send('conv-a', message('m2', 'print(x + 2)'));
    expect(later.body.messages[0]!.content).toContain('"stdout":"42\\n"');
    // Another conversation has its own session, without x.
    const other = await send('conv-b', message('m3', 'print("x" in globals())'));
    expect(other.body.messages[0]!.content).toContain('"stdout":"False\\n"');
    expect(await list()).toHaveLength(2);
    for (const s of await list())
      await env.stack.call(`/v1/sessions/${s.id}`, { method: 'DELETE' });
  });

  it('two calls of one message share one new session; the header needs a conversation id', async () => {
    const both = await send('conv-c', message('m4', 'y = 1', 'y = 2'));
    expect(both.body.messages).toHaveLength(2);
    expect(await list()).toHaveLength(1);
    const missing = await send(undefined, message('m5', 'y'));
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ error: { code: 'invalid_request' } });
    const tooLong = await send('c'.repeat(300), message('m6', 'y'));
    expect(tooLong.body.messages[0]!.content).toContain('invalid_request');
    for (const s of await list())
      await env.stack.call(`/v1/sessions/${s.id}`, { method: 'DELETE' });
  });

  it('a conversation past the client’s cap reads too_many_sessions; a deleted session is replaced', async () => {
    for (const c of ['d1', 'd2', 'd3']) await send(c, message(c, `c = "${c}"`));
    expect(await list()).toHaveLength(3);
    const over = await send('d4', message('d4', '1'));
    expect(over.status).toBe(200);
    expect(over.body.messages[0]!.content).toContain('too_many_sessions');
    // A conversation whose session is gone (deleted, expired, lost) gets a new one.
    const d1 = (await list())[0]!.id;
    await env.stack.call(`/v1/sessions/${d1}`, { method: 'DELETE' });
    const again = await send('d1', message('d1b', 'print("c" in globals())'));
    expect(again.body.messages[0]!.content).toContain('"stdout":"False\\n"');
    expect((await list()).map((s) => s.id)).not.toContain(d1);
    for (const s of await list())
      await env.stack.call(`/v1/sessions/${s.id}`, { method: 'DELETE' });
  });

  it('a client that may not run code gets its refusal, and no session', async () => {
    const carol = 'carol-key-0123456789abcdef';
    const refused = await send('conv-e', message('m7', '1'), { key: carol });
    expect(refused.body.messages[0]!.content).toContain('forbidden');
    expect(await list(carol)).toHaveLength(0);
  });
});

describe.skipIf(!first)('sessions.perConversation', () => {
  let env: Awaited<ReturnType<typeof stackWith>>;
  beforeAll(async () => {
    env = await stackWith(first!.driver, { sessions: { perConversation: true } });
  }, 120_000);
  afterAll(() => env?.close());

  it('every bridge request with a conversation id runs in that conversation’s session', async () => {
    const send = async (id: string, code: string, conversation?: string) => {
      const res = await env.stack.call('/v1/tool-calls', {
        json: {
          role: 'assistant',
          tool_calls: [
            {
              id,
              type: 'function',
              function: { name: 'run_python', arguments: JSON.stringify({ code }) },
            },
          ],
        },
        headers: conversation ? { 'x-conversation-id': conversation } : {},
      });
      return ((await res.json()) as { messages: { content: string }[] }).messages[0]!.content;
    };
    await send('p1', 'z = 7', 'conv-p');
    expect(await send('p2', 'print(z * 6)', 'conv-p')).toContain('"stdout":"42\\n"');
    // Without a conversation id a call runs fresh, as before.
    expect(await send('p3', 'print("z" in globals())')).toContain('"stdout":"False\\n"');
    const sessions = (
      (await (await env.stack.call('/v1/sessions')).json()) as { sessions: { id: string }[] }
    ).sessions;
    expect(sessions).toHaveLength(1);
    await env.stack.call(`/v1/sessions/${sessions[0]!.id}`, { method: 'DELETE' });
  });
});

describe.skipIf(!first)('GET /v1/admin/sessions', () => {
  let env: Awaited<ReturnType<typeof stackWith>>;
  beforeAll(async () => {
    env = await stackWith(first!.driver);
  }, 120_000);
  afterAll(() => env?.close());

  interface AdminList {
    sessions: { id: string; clientId: string; tool: string; workerId: string }[];
    total: number;
    truncated: boolean;
  }

  it('lists every client’s sessions, in bounded pages, and stops any of them', async () => {
    const open = async (key: string, tool = 'run_python') => {
      const res = await env.stack.call('/v1/sessions', { json: { tool }, key });
      return ((await res.json()) as { id: string }).id;
    };
    const a = await open(KEYS.alice);
    const b = await open(KEYS.bob, 'run_shell');
    const all = (await (
      await env.stack.call('/v1/admin/sessions', { key: KEYS.admin })
    ).json()) as AdminList;
    expect(all.total).toBe(2);
    expect(all.truncated).toBe(false);
    expect(all.sessions).toEqual([
      expect.objectContaining({ id: a, clientId: 'alice', tool: 'run_python' }),
      expect.objectContaining({ id: b, clientId: 'bob', tool: 'run_shell' }),
    ]);
    const page = (await (
      await env.stack.call('/v1/admin/sessions?limit=1', { key: KEYS.admin })
    ).json()) as AdminList;
    expect(page.sessions).toHaveLength(1);
    expect(page).toMatchObject({ total: 2, truncated: true });

    // Bad input and non-admins: stable codes, never a 500.
    for (const limit of ['0', '501', 'x']) {
      const bad = await env.stack.call(`/v1/admin/sessions?limit=${limit}`, { key: KEYS.admin });
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({ error: { code: 'invalid_request' } });
    }
    const notAdmin = await env.stack.call('/v1/admin/sessions', { key: KEYS.alice });
    expect(notAdmin.status).toBe(403);
    expect(await notAdmin.json()).toMatchObject({ error: { code: 'forbidden' } });
    const aliceStops = await env.stack.call(`/v1/admin/sessions/${b}`, {
      method: 'DELETE',
      key: KEYS.alice,
    });
    expect(aliceStops.status).toBe(403);

    // Stop: the admin ends bob's session; bob's next call in it is 404.
    const stop = await env.stack.call(`/v1/admin/sessions/${b}`, {
      method: 'DELETE',
      key: KEYS.admin,
    });
    expect(stop.status).toBe(204);
    const after = await env.stack.call('/tools/run_shell/execute', {
      json: { command: 'true' },
      key: KEYS.bob,
      headers: { 'x-toolgate-session': b },
    });
    expect(after.status).toBe(404);
    expect(await after.json()).toMatchObject({ error: { code: 'session_not_found' } });
    const again = await env.stack.call(`/v1/admin/sessions/${b}`, {
      method: 'DELETE',
      key: KEYS.admin,
    });
    expect(again.status).toBe(404);
    expect(await again.json()).toMatchObject({ error: { code: 'session_not_found' } });
    const left = (await (
      await env.stack.call('/v1/admin/sessions', { key: KEYS.admin })
    ).json()) as AdminList;
    expect(left.sessions.map((s) => s.id)).toEqual([a]);
    await env.stack.call(`/v1/sessions/${a}`, { method: 'DELETE' });
  });
});
