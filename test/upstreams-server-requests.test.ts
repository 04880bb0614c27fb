/**
 * An upstream that floods a call's event stream with server→client requests (`roots/list`) and
 * holds every reply POST open (docs/upstreams.md, "Requests from an upstream"): the call still
 * answers with its result, the worker opens a handful of sockets to it, another client's call
 * to the same upstream is answered meanwhile, and the worker's memory stays put. The upstream
 * runs in a process of its own, so its sending is not measured as the worker's.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

const HOSTILE = fileURLToPath(
  new URL('./fixtures/upstreams/hostile-requests.mjs', import.meta.url),
);
const STORM_REQUESTS = 5000;

interface Stats {
  accepted: number;
  open: number;
  maxOpen: number;
  replies: number;
  stormCalls: number;
  getStreams: number;
  floods: number;
}

async function until<T>(what: () => Promise<T> | T, ok: (v: T) => boolean, ms = 20_000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await what();
    if (ok(value) || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Hostile {
  child: ChildProcess;
  base: string;
  stats(): Promise<Stats>;
}

async function startHostile(env: Record<string, string> = {}): Promise<Hostile> {
  const child = spawn(process.execPath, [HOSTILE], {
    env: { PATH: process.env.PATH ?? '', STORM_REQUESTS: String(STORM_REQUESTS), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`no hostile upstream: ${output}`)), 10_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const m = /listening on (\d+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.once('exit', (code) => reject(new Error(`hostile upstream exited ${code}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    child,
    base,
    stats: async () => (await (await fetch(`${base}/stats`)).json()) as Stats,
  };
}

async function stackFor(hostile: Hostile): Promise<Stack> {
  const stack = await startStack({
    config: {
      policy: { http: { allowHosts: ['127.0.0.1'] } },
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'] },
        { id: 'bob', key: KEYS.bob, tools: ['hostile__*'] },
      ],
      upstreams: [{ id: 'hostile', url: `${hostile.base}/mcp`, trust: 'auto', timeoutMs: 20_000 }],
    },
  });
  const listed = async () =>
    ((await (await stack.call('/tools')).json()) as { name: string }[]).map((t) => t.name);
  await until(listed, (names) => names.includes('hostile__storm'));
  return stack;
}

const echo = async (stack: Stack, key: string, text: string) => {
  const t0 = Date.now();
  const res = await stack.call('/tools/hostile__echo/execute', { key, json: { text } });
  return { ms: Date.now() - t0, body: (await res.json()) as Record<string, unknown> };
};

describe('server→client requests on a call’s event stream (the lean path)', () => {
  let stack: Stack;
  let hostile: Hostile;

  beforeAll(async () => {
    hostile = await startHostile();
    stack = await stackFor(hostile);
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
    hostile?.child.kill();
  });

  it('answers a few, ignores the rest, opens a handful of sockets and keeps the call’s answer', async () => {
    // The worker's session is open before the storm: what it opens from now on is the storm's.
    expect((await echo(stack, KEYS.bob, 'warm')).body).toMatchObject({ status: 'ok' });
    const before = await hostile.stats();
    global.gc?.();
    const rssBefore = process.memoryUsage().rss;

    const storm = stack
      .call('/tools/hostile__storm/execute', { json: {} })
      .then(async (res) => (await res.json()) as Record<string, unknown>);
    // Another client's call while the upstream floods the storm's stream.
    await until(hostile.stats, (s) => s.stormCalls > before.stormCalls);
    const other = await echo(stack, KEYS.bob, 'meanwhile');
    let rssPeak = process.memoryUsage().rss;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
    }, 50);
    const result = await storm;
    clearInterval(sampler);
    const after = await hostile.stats();

    // The call's own answer, though the stream stayed open and thousands of replies were due.
    expect(result).toMatchObject({ status: 'ok', result: 'the storm is over' });
    // Answered at most perCall (16) of the 5,000: the upstream saw no more reply POSTs than that.
    expect(after.replies - before.replies).toBeGreaterThan(0);
    expect(after.replies - before.replies).toBeLessThanOrEqual(16);
    // A handful of sockets, not one per request (12,791 in the report).
    expect(after.accepted - before.accepted).toBeLessThanOrEqual(8);
    expect(after.maxOpen).toBeLessThanOrEqual(20);
    // Another client was answered promptly (0.07 s unloaded; 5–11 s in the report).
    expect(other.body).toMatchObject({ status: 'ok', result: 'echo: meanwhile' });
    expect(other.ms).toBeLessThan(3000);
    // The worker's memory stayed put (~500 MB in the report).
    expect(rssPeak - rssBefore).toBeLessThan(150 * 1024 * 1024);
  }, 60_000);

  it('keeps the connection of a call whose event stream ends after its answer', async () => {
    const call = (text: string) =>
      stack
        .call('/tools/hostile__echo_stream/execute', { json: { text } })
        .then(async (res) => (await res.json()) as Record<string, unknown>);
    expect(await call('warm')).toMatchObject({ status: 'ok', result: 'echo: warm' });
    const before = await hostile.stats();
    for (let i = 0; i < 20; i++)
      expect(await call(`n${i}`)).toMatchObject({ status: 'ok', result: `echo: n${i}` });
    const after = await hostile.stats();
    // A call returns at its answer and the stream's end (50 ms later here) is still read, so
    // the socket goes back to the pool: a few sockets for 20 calls (4 measured; 19 when the
    // stream is closed at the answer), while the next call may start before that end — more
    // often on a loaded machine (9 seen in CI at load 7): at most 12, still far from 19.
    expect(after.accepted - before.accepted).toBeLessThanOrEqual(12);
  }, 60_000);
});

describe('server→client requests on the session’s own stream (the SDK client)', () => {
  let stack: Stack;
  let hostile: Hostile;

  beforeAll(async () => {
    hostile = await startHostile({ GET_STORM: '1' });
    stack = await stackFor(hostile);
  }, 60_000);

  afterAll(async () => {
    await stack?.close();
    hostile?.child.kill();
  });

  it('answers at most perSession at once over two sockets per session, and calls go on', async () => {
    // The worker's session opens its GET stream: 5,000 pings on it, every reply held.
    expect((await echo(stack, KEYS.bob, 'first')).body).toMatchObject({ status: 'ok' });
    const flooded = await until(hostile.stats, (s) => s.getStreams >= 2 && s.floods >= 2);
    expect(flooded.getStreams).toBeGreaterThanOrEqual(2); // the gateway's listing and the worker's
    const other = await echo(stack, KEYS.bob, 'meanwhile');
    const after = await hostile.stats();
    expect(other.body).toMatchObject({ status: 'ok', result: 'echo: meanwhile' });
    expect(other.ms).toBeLessThan(3000);
    // Per session at most perSession (64) replies outstanding, of which two reach the server at
    // a time; not one POST, and one socket, per ping (5,000 per stream here). All sockets counted:
    // the sessions' handshakes, listings, GET streams and calls (11 measured), and the replies'.
    expect(after.replies).toBeLessThanOrEqual(after.getStreams * 64);
    expect(after.accepted).toBeLessThanOrEqual(30);
    expect(after.maxOpen).toBeLessThanOrEqual(30);
  }, 60_000);
});
