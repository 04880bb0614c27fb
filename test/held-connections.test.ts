import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConnectionBudget, Keys } from '@toolgate/calls';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type Service } from './support/process.js';
import { startRedisServer, type RedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools, ticker } from './support/tools.js';

// Requests that hold their connection open (call event streams, the approvals feed, MCP
// requests that wait) share one budget per client across gateways (docs/live-output.md).
// A private redis-server: this file counts the commands Redis runs, which other test files
// running in parallel on the shared one would blur.

/** calls.events.maxStreamsPerClient's default. */
const CAP = 16;

let server: RedisServer;
let redis: Redis;
let stack: Stack;
let prefix: string;
let budget: ConnectionBudget;
/** A call of alice's parked for approval: it stays open as long as the tests need. */
let parked: string;
const services: Service[] = [];

interface Opened {
  /** Held while open: fetch cancels the body of a Response that is garbage-collected. */
  res: Response;
  status: number;
  code?: string;
  retryAfter?: string | null;
  close(): void;
}

/** Opens a held request and resolves once its answer's headers are in (200: still open). */
async function open(path: string, key: string = KEYS.alice, base = stack.url): Promise<Opened> {
  const ctl = new AbortController();
  const res = await fetch(base + path, {
    headers: { authorization: `Bearer ${key}` },
    signal: ctl.signal,
  });
  if (res.status === 200) return { res, status: 200, close: () => ctl.abort() };
  const body = (await res.json()) as { error: { code: string } };
  return {
    res,
    status: res.status,
    code: body.error.code,
    retryAfter: res.headers.get('retry-after'),
    close: () => undefined,
  };
}

const events = (id: string) => `/v1/calls/${id}/events`;

/** A 2025-era MCP `tasks/result`: held by the gateway until the task ends or the client leaves. */
function taskResult(taskId: string): { answer: Promise<Response | undefined>; close(): void } {
  const ctl = new AbortController();
  const answer = fetch(`${stack.url}/mcp`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${KEYS.alice}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tasks/result', params: { taskId } }),
    signal: ctl.signal,
  }).catch(() => undefined);
  return { answer, close: () => ctl.abort() };
}

/** A POST to /mcp (a 2025-era client that names no revision unless `version` is given). */
function mcpPost(
  body: unknown,
  version?: string,
): { answer: Promise<Response | undefined>; close(): void } {
  const ctl = new AbortController();
  const answer = fetch(`${stack.url}/mcp`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${KEYS.alice}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(version ? { 'mcp-protocol-version': version } : {}),
    },
    body: JSON.stringify(body),
    signal: ctl.signal,
  }).catch(() => undefined);
  return { answer, close: () => ctl.abort() };
}

async function until<T>(what: () => Promise<T>, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await what();
    if (ok(value) || Date.now() > end) return value;
    await sleep(50);
  }
}

/** The client's live slots once they are down to `n` (or whatever they are after 5 s). */
const slotsAt = (client: string, n: number) =>
  until(
    () => budget.count(client),
    (held) => held === n,
    5000,
  );

/** Commands Redis ran per second over `ms` (INFO's own two calls taken out). */
async function commandsPerSecond(ms = 4000): Promise<number> {
  const total = async () =>
    Number(/total_commands_processed:(\d+)/.exec(await redis.info('stats'))?.[1]);
  const before = await total();
  await sleep(ms);
  return ((await total()) - before - 1) / (ms / 1000);
}

async function park(): Promise<string> {
  const res = await stack.call('/tools/wipe_disk/execute', { json: { disk: 'sdz' } });
  expect(res.status).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis(server.port, '127.0.0.1');
  prefix = `held${randomUUID().slice(0, 6)}`;
  stack = await startStack({
    tools: [...testTools, ticker],
    config: { redis: { url: server.url, prefix } },
  });
  budget = new ConnectionBudget(redis, Keys.for({ prefix }), { leaseMs: 30_000 });
  parked = await park();
});

afterAll(async () => {
  for (const s of services) s.child.kill('SIGKILL');
  await stack?.close();
  redis?.disconnect();
  await server?.stop();
});

describe('held connections: one budget per client, on every gateway', () => {
  it('80 simultaneous event streams for one client: 16 open, 64 are 429 too_many_streams; other clients are not affected', async () => {
    const burst = await Promise.all(Array.from({ length: 80 }, () => open(events(parked))));
    try {
      expect(burst.filter((o) => o.status === 200)).toHaveLength(CAP);
      const refused = burst.filter((o) => o.status !== 200);
      expect(refused).toHaveLength(80 - CAP);
      for (const r of refused) {
        expect(r).toMatchObject({ status: 429, code: 'too_many_streams', retryAfter: '5' });
      }
      expect(await budget.count('alice')).toBe(CAP);
      // The admin's approvals feed is its own client's budget: alice's full budget is not its.
      const feed = await open('/v1/approvals/events', KEYS.admin);
      expect(feed.status).toBe(200);
      feed.close();
    } finally {
      for (const o of burst) o.close();
    }
    // Closing gives every slot back.
    expect(await slotsAt('alice', 0)).toBe(0);
    expect(await slotsAt('ops', 0)).toBe(0);
  });

  it('MCP tasks/result long-polls take from the same budget as event streams; a client that leaves gives its slot back', async () => {
    const polls = Array.from({ length: 10 }, () => taskResult(parked));
    const streams: Opened[] = [];
    try {
      expect(await slotsAt('alice', 10)).toBe(10);
      for (let i = 0; i < CAP - 10; i++) streams.push(await open(events(parked)));
      expect(streams.map((s) => s.status)).toEqual(Array(CAP - 10).fill(200));
      // Full: one more of either kind is refused at the door.
      expect(await open(events(parked))).toMatchObject({ status: 429, code: 'too_many_streams' });
      const extra = await taskResult(parked).answer;
      expect(extra?.status).toBe(429);
      expect(((await extra!.json()) as { error: { code: string } }).error.code).toBe(
        'too_many_streams',
      );
      // Three polls leave: three streams open at once.
      for (const p of polls.slice(0, 3)) p.close();
      await slotsAt('alice', CAP - 3);
      const again = await Promise.all([1, 2, 3].map(() => open(events(parked))));
      streams.push(...again);
      expect(again.map((s) => s.status)).toEqual([200, 200, 200]);
    } finally {
      for (const p of polls) p.close();
      for (const s of streams) s.close();
    }
    expect(await slotsAt('alice', 0)).toBe(0);
  });

  it('MCP batches take a slot per call that waits: 24 one-element batches of a long call hold 16, 8 are 429; batched cancels end them', async () => {
    const ids = Array.from({ length: 24 }, (_, i) => 100 + i);
    const statuses = new Map<number, number>();
    const refusals: Response[] = [];
    const posts = ids.map((id) => {
      const post = mcpPost([
        {
          jsonrpc: '2.0',
          id,
          method: 'tools/call',
          params: { name: 'ticker', arguments: { n: 250, ms: 100 } },
        },
      ]);
      void post.answer.then((res) => {
        if (!res) return;
        statuses.set(id, res.status);
        if (res.status !== 200) refusals.push(res);
      });
      return post;
    });
    try {
      await until(
        async () => statuses.size,
        (n) => n === ids.length,
      );
      expect([...statuses.values()].filter((s) => s === 200)).toHaveLength(CAP);
      expect(refusals).toHaveLength(ids.length - CAP);
      for (const res of refusals) {
        expect(res.status).toBe(429);
        expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
          'too_many_streams',
        );
      }
      expect(await budget.count('alice')).toBe(CAP);
      // notifications/cancelled in batches of one reach the calls (ticker would run 25 s): their
      // requests answer and give their slots back, with every client still connected.
      const left = await until(
        async () => {
          await Promise.all(
            ids.map(
              (id) =>
                mcpPost([
                  { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id } },
                ]).answer,
            ),
          );
          return budget.count('alice');
        },
        (held) => held === 0,
        8000,
      );
      expect(left).toBe(0);
    } finally {
      for (const p of posts) p.close();
    }
    expect(await slotsAt('alice', 0)).toBe(0);
  });

  it('a batch from a client that names 2025-06-18 or later is a JSON-RPC -32600, holding nothing', async () => {
    for (const version of ['2025-06-18', '2025-11-25', '2026-07-28']) {
      const res = await mcpPost(
        [
          {
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/call',
            params: { name: 'ticker', arguments: { n: 250, ms: 100 } },
          },
        ],
        version,
      ).answer;
      expect(res?.status, version).toBe(400);
      expect(await res!.json(), version).toMatchObject({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32600, message: expect.stringContaining('batch') },
      });
    }
    expect(await budget.count('alice')).toBe(0);
  });

  it('120 clients that hang up during the request leave nothing behind: 16 streams open at once after, and Redis is back to idle', async () => {
    const idle = await commandsPerSecond();
    const port = Number(new URL(stack.url).port);
    const request =
      `GET ${events(parked)} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
      `Authorization: Bearer ${KEYS.alice}\r\n\r\n`;
    await Promise.all(
      Array.from(
        { length: 120 },
        (_, i) =>
          new Promise<void>((resolve) => {
            const socket = connect(port, '127.0.0.1', () => {
              socket.write(request);
              // Reset within a few ms: while the gateway is still checking the key and the call.
              setTimeout(() => socket.resetAndDestroy(), 1 + (i % 5));
            });
            socket.on('error', () => resolve());
            socket.on('close', () => resolve());
          }),
      ),
    );
    await slotsAt('alice', 0);
    await sleep(500); // the gateway has seen every hang-up
    const streams = await Promise.all(Array.from({ length: CAP }, () => open(events(parked))));
    for (const s of streams) s.close();
    expect(streams.map((s) => s.status)).toEqual(Array(CAP).fill(200));
    await slotsAt('alice', 0);
    // Leaked watchers would re-read the call every 2 s each (~10 commands a read): 120 of
    // them are ~600 commands a second over the idle rate.
    const after = await commandsPerSecond();
    expect(after).toBeLessThan(idle + 20);
  });

  it('a killed gateway’s slots come back within its lease', async () => {
    // Renewed every third of it: long enough that a gateway slowed by a loaded machine still
    // renews in time, short enough for a test.
    const leaseSeconds = 5;
    const dir = mkdtempSync(join(tmpdir(), 'toolgate-held-'));
    const config = join(dir, 'toolgate.yaml');
    writeFileSync(
      config,
      [
        'redis:',
        `  url: ${server.url}`,
        `  prefix: ${prefix}`,
        'server:',
        '  port: 0',
        '  host: 127.0.0.1',
        'log:',
        '  level: info',
        'calls:',
        '  events:',
        `    streamLeaseSeconds: ${leaseSeconds}`,
        'clients:',
        '  - id: alice',
        `    key: ${KEYS.alice}`,
        '    tools: ["*"]',
        '',
      ].join('\n'),
    );
    const other = startService('gateway', { TOOLGATE_CONFIG: config });
    services.push(other);
    const [, port] = await other.waitFor(/"port":(\d+),"msg":"gateway listening"/, 60_000);
    const otherUrl = `http://127.0.0.1:${port}`;
    // The other gateway holds all of alice's slots: this one refuses her a stream.
    const held = await Promise.all(
      Array.from({ length: CAP }, () => open(events(parked), KEYS.alice, otherUrl)),
    );
    expect(held.map((s) => s.status)).toEqual(Array(CAP).fill(200));
    expect(await open(events(parked))).toMatchObject({ status: 429, code: 'too_many_streams' });
    // Renewed while the gateway lives: still refused after more than a lease.
    await sleep(1.5 * leaseSeconds * 1000);
    expect(await open(events(parked))).toMatchObject({ status: 429, code: 'too_many_streams' });

    other.child.kill('SIGKILL');
    await other.exited;
    const killedAt = Date.now();
    let first: Opened;
    for (;;) {
      first = await open(events(parked));
      if (first.status === 200 || Date.now() - killedAt > 10_000) break;
      await sleep(100);
    }
    const back = Date.now() - killedAt;
    first.close();
    expect(first.status).toBe(200);
    expect(back).toBeLessThanOrEqual(leaseSeconds * 1000 + 2000);
    for (const s of held) s.close();
    // All of them, at once.
    const streams = await Promise.all(Array.from({ length: CAP }, () => open(events(parked))));
    for (const s of streams) s.close();
    expect(streams.map((s) => s.status)).toEqual(Array(CAP).fill(200));
  });
});
