/**
 * Issue 31 on one Redis Cluster: three shards that are three hash tags (prefixes) of the same
 * 3-master cluster, chosen so each tag's slot is on another master (docs/redis-cluster.md,
 * "Shards on one cluster"). No replicas and `cluster-require-full-coverage no`: `kill -9` of
 * one master leaves its slots down for good while the other two masters go on. Under load, the
 * dead master's shard's clients get 503 `shard_unavailable`; the other shards' calls all end
 * `ok`, none accepted is lost.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finalStatuses, startCallLoad, type CallLoad } from '../support/call-load.js';
import { keySlot, startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { KEYS, startStack, type Stack } from '../support/stack.js';
import { testTools } from '../support/tools.js';

const CAROL = 'carol-key-0123456789abcdef';
const SHARDS = ['s0', 's1', 's2'] as const;
type ShardId = (typeof SHARDS)[number];
const KEY_OF: Record<ShardId, string> = { s0: KEYS.alice, s1: KEYS.bob, s2: CAROL };

let cluster: RedisCluster;
let stack: Stack;
/** Each shard's prefix, its hash slot and the master serving that slot. */
const placed = {} as Record<ShardId, { prefix: string; slot: number; master: string }>;

/**
 * A prefix whose hash tag `{prefix}` (the root of every toolgate key of a cluster shard) hashes
 * to a slot `master` serves: what an operator does with CLUSTER KEYSLOT and CLUSTER SHARDS.
 * `andAway`: also a key name made from the plain prefix must hash to a slot on that other master
 * (below: where a counter outside the root would sit).
 */
async function prefixOn(
  master: string,
  andAway?: { key: (prefix: string) => string; master: string },
): Promise<{ prefix: string; slot: number }> {
  for (let i = 0; i < 500; i++) {
    const prefix = `cs${randomUUID().slice(0, 6)}`;
    const slot = await keySlot(cluster, `{${prefix}}`);
    if ((await cluster.ownerOf(slot)) !== master) continue;
    if (
      andAway &&
      (await cluster.ownerOf(await keySlot(cluster, andAway.key(prefix)))) !== andAway.master
    )
      continue;
    return { prefix, slot };
  }
  throw new Error(`no prefix found whose slot ${master} serves`);
}

/** Whether any key on `address` names `text`. */
async function keysOn(address: string, text: string): Promise<string[]> {
  const node = cluster.node(address);
  try {
    return (await node.call('KEYS', `*${text}*`)) as string[];
  } finally {
    node.disconnect();
  }
}

beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3, replicas: 0, fullCoverage: false });
  for (const [i, id] of SHARDS.entries()) {
    const master = cluster.nodes[i]!;
    // s0's: its prefix such that alice's rate counter, were it named from the plain prefix
    // (spread over the masters, as it once was), would sit on s1's master, killed below.
    const away =
      id === 's0'
        ? { key: (p: string) => `${p}:rate:1000000:alice`, master: cluster.nodes[1]! }
        : undefined;
    placed[id] = { ...(await prefixOn(master, away)), master };
  }
  stack = await startStack({
    tools: testTools,
    config: {
      redis: {
        prefix: `cs${randomUUID().slice(0, 6)}`,
        shards: SHARDS.map((id) => ({
          id,
          cluster: { nodes: cluster.nodes },
          prefix: placed[id].prefix,
          ...(id === 's0' ? { home: true } : {}),
        })),
      },
      clients: [
        // Polling every accepted call's status costs rate budget: allow plenty.
        { id: 'alice', key: KEYS.alice, tools: ['*'], shard: 's0', rateLimit: { perMinute: 1e6 } },
        { id: 'bob', key: KEYS.bob, tools: ['*'], shard: 's1', rateLimit: { perMinute: 1e6 } },
        { id: 'carol', key: CAROL, tools: ['*'], shard: 's2', rateLimit: { perMinute: 1e6 } },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true, shard: 's0' },
      ],
    },
  });
}, 90_000);

afterAll(async () => {
  await stack?.close();
  await cluster?.stop();
});

describe('three shards as three hash tags of one Redis Cluster', () => {
  it("each shard's slot is on its own master, and a client's call lands there, on no other", async () => {
    // Three different masters, as the prefixes were chosen for: the slots agree.
    expect(new Set(SHARDS.map((id) => placed[id].master)).size).toBe(3);
    for (const id of SHARDS) {
      expect(await keySlot(cluster, `{${placed[id].prefix}}:call:x`)).toBe(placed[id].slot);
      expect(await cluster.ownerOf(placed[id].slot)).toBe(placed[id].master);
    }
    for (const id of SHARDS) {
      const res = await stack.call('/tools/calculator/execute', {
        key: KEY_OF[id],
        json: { expression: '2*(3+4)' },
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { id: string; status: string; result: number };
      expect(body).toMatchObject({ status: 'ok', result: 14 });
      for (const master of cluster.nodes) {
        const named = await keysOn(master, body.id);
        if (master === placed[id].master) {
          expect(named.length).toBeGreaterThan(0);
          for (const k of named) expect(k.startsWith(`{${placed[id].prefix}}:`)).toBe(true);
        } else expect(named).toEqual([]);
      }
    }
  });

  it("kill -9 of one shard's master under load: its clients get 503 shard_unavailable, the other shards' calls all end ok", async () => {
    const loads: Record<'s0' | 's2', CallLoad> = {
      s0: startCallLoad(stack.url, KEY_OF.s0, { loops: 2 }),
      s2: startCallLoad(stack.url, KEY_OF.s2, { loops: 2 }),
    };
    await new Promise((r) => setTimeout(r, 1500));
    const victim = cluster.servers.find((s) => `127.0.0.1:${s.port}` === placed.s1.master)!;
    const killedAt = Date.now();
    victim.child.kill('SIGKILL');

    // bob: refused, his shard named, told when to retry. Polled: the gateway learns of the
    // death from the commands it sends there, each retried through ioredis's redirections
    // first (about 4 s here) — and never a 500 on the way.
    const bobAnswers: { status: number; retryAfter: string | null; body: unknown }[] = [];
    const bob = async (i: number) => {
      const res = await stack.call('/tools/calculator/execute', {
        key: KEY_OF.s1,
        json: { expression: `${i}+1` },
        signal: AbortSignal.timeout(30_000),
      });
      const answer = {
        status: res.status,
        retryAfter: res.headers.get('retry-after'),
        body: await res.json(),
      };
      bobAnswers.push(answer);
      return answer;
    };
    for (let i = 0; i < 100 && (await bob(i)).status !== 503; i++)
      await new Promise((r) => setTimeout(r, 100));
    const refusedAfter = Date.now() - killedAt;
    // And so on, for as long as the master is gone.
    const t0 = Date.now();
    for (let i = 0; i < 2; i++) await bob(100 + i);
    const againMs = (Date.now() - t0) / 2;
    expect(bobAnswers.at(-1)?.status).toBe(503);
    for (const answer of bobAnswers.filter((a) => a.status !== 200))
      expect(answer).toMatchObject({
        status: 503,
        retryAfter: expect.stringMatching(/^\d+$/),
        body: {
          error: {
            code: 'shard_unavailable',
            message: expect.stringContaining('"s1"'),
            details: { shard: 's1' },
          },
        },
      });

    // The gateway stays ready and names the dead shard (polled: /readyz reads each shard).
    let ready: { status: number; body: unknown } | undefined;
    for (let i = 0; i < 50; i++) {
      const res = await stack.call('/readyz', { key: null });
      ready = { status: res.status, body: await res.json() };
      if ((ready.body as { shards?: { s1?: { state?: string } } }).shards?.s1?.state === 'down')
        break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(ready).toMatchObject({
      status: 200,
      body: {
        status: 'ready',
        shards: { s0: { state: 'up' }, s1: { state: 'down' }, s2: { state: 'up' } },
      },
    });

    // The others go on through the outage, which here lasts for good (no replica).
    await new Promise((r) => setTimeout(r, 3000));
    const answers = { s0: await loads.s0.stop(), s2: await loads.s2.stop() };
    const summary: string[] = [];
    for (const id of ['s0', 's2'] as const) {
      const accepted = answers[id].filter((a) => a.id !== undefined);
      const refusedHere = answers[id].filter((a) => a.id === undefined);
      const after = accepted.filter((a) => a.at > killedAt - loads[id].started);
      summary.push(`${id}: ${accepted.length} accepted (${after.length} after the kill)`);
      expect(refusedHere).toEqual([]);
      expect(after.length).toBeGreaterThan(10);
      const finals = await finalStatuses(
        stack.url,
        KEY_OF[id],
        accepted.map((a) => a.id!),
      );
      expect([...finals].filter(([, end]) => end.status !== 'ok')).toEqual([]);
    }
    console.warn(
      `cluster shards: s1's master killed; bob refused 503 ${refusedAfter} ms after the kill, ` +
        `then each call in ${againMs} ms; ${summary.join('; ')}; every one ended ok`,
    );
  }, 120_000);
});
