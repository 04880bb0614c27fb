/**
 * Issue 31: tenants spread over Redis shards. Three real redis-server processes are the shards
 * (s1 with an AOF fsynced on every write, as docs/reliability.md asks of a master whose calls
 * must survive a restart); clients are pinned one to each. A client's calls and records live on
 * its shard only; `kill -9` of one master under load takes down its clients alone (503
 * `shard_unavailable`, over HTTP and MCP), the others' calls all end `ok`; the calls it had
 * accepted end once it is back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, startShardServers, type RedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

const CAROL = 'carol-key-0123456789abcdef';
const AOF = ['--appendonly', 'yes', '--appendfsync', 'always'];

let servers: Record<'s0' | 's1' | 's2', RedisServer>;
let aofDir: string;
let stack: Stack;
const prefix = `sh${randomUUID().slice(0, 6)}`;

beforeAll(async () => {
  aofDir = mkdtempSync(join(tmpdir(), 'toolgate-shard-aof-'));
  let shards;
  ({ servers, shards } = await startShardServers(['s0', 's1', 's2'] as const, (id) =>
    id === 's1' ? [...AOF, '--dir', aofDir] : [],
  ));
  // One gateway and one worker, each serving all three shards.
  stack = await startStack({
    tools: testTools,
    config: {
      redis: {
        prefix,
        shards,
      },
      clients: [
        // The load below runs as fast as calls go: no rate limit in its way.
        { id: 'alice', key: KEYS.alice, tools: ['*'], shard: 's0', rateLimit: { perMinute: 1e6 } },
        { id: 'bob', key: KEYS.bob, tools: ['*'], shard: 's1', rateLimit: { perMinute: 1e6 } },
        { id: 'carol', key: CAROL, tools: ['*'], shard: 's2', rateLimit: { perMinute: 1e6 } },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true, shard: 's0' },
      ],
    },
  });
}, 60_000);

afterAll(async () => {
  await stack?.close();
  await Promise.all(Object.values(servers ?? {}).map((s) => s.stop()));
  rmSync(aofDir, { recursive: true, force: true });
});

const calc = (key: string, expression = '2*(3+4)') =>
  stack.call('/tools/calculator/execute', { key, json: { expression } });

/** Every key on a shard's Redis that names `text`. */
async function keysNaming(server: RedisServer, text: string): Promise<string[]> {
  const redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
  try {
    return await redis.keys(`*${text}*`);
  } finally {
    redis.disconnect();
  }
}

describe('tenants on three Redis shards', () => {
  it("a client's calls and their records are on its own shard, none on another", async () => {
    const owners = { s0: KEYS.alice, s1: KEYS.bob, s2: CAROL } as const;
    const clientOf = { s0: 'alice', s1: 'bob', s2: 'carol' } as const;
    for (const [shard, key] of Object.entries(owners)) {
      const res = await calc(key);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { id: string; status: string; result: number };
      expect(body).toMatchObject({ status: 'ok', result: 14 });
      // The record is read back through the gateway, from the client's shard.
      expect((await stack.call(`/v1/calls/${body.id}`, { key })).status).toBe(200);
      for (const [other, server] of Object.entries(servers)) {
        const named = await keysNaming(server, body.id);
        if (other === shard) expect(named.length).toBeGreaterThan(0);
        else expect(named).toEqual([]);
      }
      // The memory tool's entries too: on the client's shard, found by its own search.
      const saved = await stack.call('/tools/memory_save/execute', {
        key,
        json: { text: `a note of ${shard}'s client` },
      });
      expect(await saved.json()).toMatchObject({ status: 'ok' });
      const found = await stack.call('/tools/memory_search/execute', {
        key,
        json: { query: 'note' },
      });
      expect(JSON.stringify(await found.json())).toContain(`a note of ${shard}'s client`);
      for (const [other, server] of Object.entries(servers)) {
        const memory = (await keysNaming(server, ':memory:')).filter((k) =>
          k.includes(`{${clientOf[shard as keyof typeof clientOf]}}`),
        );
        expect(memory.length > 0).toBe(other === shard);
      }
      // Another shard's client cannot look it up (it is not theirs, wherever it is).
      const stranger = key === KEYS.alice ? CAROL : KEYS.alice;
      expect((await stack.call(`/v1/calls/${body.id}`, { key: stranger })).status).toBe(404);
    }
  });

  it('kill -9 of one master under load: its clients get 503 shard_unavailable, the others every call ok, and its accepted calls end once it is back', async () => {
    // Calls bob's shard accepted before it goes: a slow one, and others queued behind it.
    const accepted: string[] = [];
    for (const json of [{ ms: 1500 }, { ms: 10 }, { ms: 10 }, { ms: 10 }]) {
      const res = await stack.call('/tools/sleep/execute', {
        key: KEYS.bob,
        json,
        headers: { prefer: 'respond-async' },
      });
      expect(res.status).toBe(202);
      accepted.push(((await res.json()) as { id: string }).id);
    }

    // Load on the other two shards, all through the outage.
    let loading = true;
    const answers: { status: number; body: unknown }[] = [];
    const load = Promise.all(
      [KEYS.alice, CAROL].map(async (key) => {
        while (loading) {
          const res = await calc(key, '6*7');
          answers.push({ status: res.status, body: await res.json() });
        }
      }),
    );
    await new Promise((r) => setTimeout(r, 300));
    const { port } = servers.s1;
    servers.s1.child.kill('SIGKILL');
    await servers.s1.stop();

    // bob: refused with the shard named, and told when to retry.
    const refused = await calc(KEYS.bob);
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBeTruthy();
    expect(await refused.json()).toEqual({
      error: {
        code: 'shard_unavailable',
        message: expect.stringContaining('"s1"'),
        details: { shard: 's1' },
      },
    });
    // The same over MCP: the POST of a tools/call is answered 503 with the same error.
    const mcp = new Client({ name: 'shard-test', version: '1.0.0' });
    await mcp.connect(
      new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${KEYS.bob}` } },
      }),
    );
    const viaMcp = await mcp
      .callTool({ name: 'calculator', arguments: { expression: '1+1' } })
      .then(
        () => undefined,
        (err: unknown) => err as { code?: unknown; message?: string },
      );
    await mcp.close();
    expect(viaMcp?.code).toBe(503);
    expect(viaMcp?.message).toContain('"code":"shard_unavailable"');
    const raw = await stack.call('/mcp', {
      key: KEYS.bob,
      headers: { accept: 'application/json, text/event-stream' },
      json: {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'calculator', arguments: { expression: '1+1' } },
      },
    });
    expect(raw.status).toBe(503);
    expect(raw.headers.get('retry-after')).toBeTruthy();
    expect(await raw.json()).toMatchObject({
      error: { code: 'shard_unavailable', details: { shard: 's1' } },
    });
    // The gateway stays ready and names the shard that is down; its metric says so too.
    const ready = await stack.call('/readyz', { key: null });
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({
      status: 'ready',
      shards: {
        s0: { state: 'up' },
        s1: { state: 'down', reason: expect.any(String) },
        s2: { state: 'up' },
      },
    });
    const metrics = await (await fetch(stack.metricsUrl)).text();
    expect(metrics).toMatch(/^toolgate_redis_shard_up\{shard="s1"[^}]*\} 0$/m);
    expect(metrics).toMatch(/^toolgate_redis_shard_up\{shard="s2"[^}]*\} 1$/m);

    await new Promise((r) => setTimeout(r, 1000));
    servers.s1 = await startRedisServer(port, [...AOF, '--dir', aofDir]);
    // bob's calls are taken again once his shard is back.
    let back = 0;
    for (let i = 0; i < 100 && back !== 200; i++) {
      back = (await calc(KEYS.bob)).status;
      if (back !== 200) await new Promise((r) => setTimeout(r, 200));
    }
    expect(back).toBe(200);
    loading = false;
    await load;

    // Nobody else noticed: every one of their calls answered 200 ok, right through.
    expect(answers.length).toBeGreaterThan(10);
    const notOk = answers.filter(
      (a) => a.status !== 200 || (a.body as { status?: string }).status !== 'ok',
    );
    expect(notOk).toEqual([]);

    // What bob's shard had accepted is not lost: each call ends. The three queued behind
    // the slow one had not started, so they end ok; the slow one may have been running.
    const ends: Record<string, string> = {};
    for (let i = 0; i < 150 && Object.keys(ends).length < accepted.length; i++) {
      for (const id of accepted) {
        if (ends[id]) continue;
        const res = await stack.call(`/v1/calls/${id}`, { key: KEYS.bob });
        expect(res.status).toBe(200);
        const { status } = (await res.json()) as { status: string };
        if (!['queued', 'running'].includes(status)) ends[id] = status;
      }
      if (Object.keys(ends).length < accepted.length) await new Promise((r) => setTimeout(r, 200));
    }
    expect(Object.keys(ends)).toHaveLength(accepted.length);
    expect(accepted.slice(1).map((id) => ends[id])).toEqual(['ok', 'ok', 'ok']);
  }, 120_000);
});
