/**
 * toolgate on a real Redis Cluster (3 masters with a replica each, started here, private to this
 * file): where its keys land, and that a master failover or a resharding of toolgate's slot
 * during a steady stream of calls loses no accepted call. The rest of the integration suite runs
 * on a cluster too (the `cluster` project in vitest.config.ts).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finalStatuses, longestStall, startCallLoad } from '../support/call-load.js';
import { keySlot, startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { KEYS, startStack, type Stack } from '../support/stack.js';
import { testTools } from '../support/tools.js';

let cluster: RedisCluster;

beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3, replicas: 1 });
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
});

async function clusterStack(durability?: {
  replicas: number;
  timeoutMs: number;
}): Promise<{ stack: Stack; prefix: string; slot: number }> {
  const prefix = `c${randomUUID().slice(0, 8)}`;
  const stack = await startStack({
    tools: testTools,
    config: {
      redis: { cluster: { nodes: cluster.nodes }, prefix, ...(durability ? { durability } : {}) },
      clients: [
        // Polling every accepted call's status costs rate budget: allow plenty.
        { id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 100_000 } },
        { id: 'bob', key: KEYS.bob, tools: ['*'], rateLimit: { perMinute: 100_000 } },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
    },
  });
  return { stack, prefix, slot: await keySlot(cluster, `{${prefix}}`) };
}

/** Every key on every master whose name starts with `pattern`, by the master holding it. */
async function keysByMaster(pattern: string): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  for (const address of cluster.live()) {
    const node = cluster.node(address);
    try {
      const role = ((await node.call('ROLE')) as [string])[0];
      if (role !== 'master') continue;
      const keys = (await node.call('KEYS', `${pattern}*`)) as string[];
      if (keys.length > 0) out.set(address, keys);
    } finally {
      node.disconnect();
    }
  }
  return out;
}

/** The live masters, and which of them have a replica. */
async function masters(): Promise<{ all: string[]; replicated: string[] }> {
  const all: string[] = [];
  const replicated: string[] = [];
  for (const address of cluster.live()) {
    const node = cluster.node(address);
    try {
      const role = (await node.call('ROLE')) as [string, unknown, unknown[]];
      if (role[0] !== 'master') continue;
      all.push(address);
      if (role[2].length > 0) replicated.push(address);
    } finally {
      node.disconnect();
    }
  }
  return { all, replicated };
}

/**
 * Moves `slot` with its keys to another master, the way `redis-cli --cluster reshard` does: to
 * one with a replica (the failover test before leaves a promoted master without one, where
 * every durability WAIT would time out).
 */
async function migrateSlot(slot: number): Promise<{ from: string; to: string; keys: number }> {
  const from = await cluster.ownerOf(slot);
  const { all, replicated } = await masters();
  const to = replicated.find((m) => m !== from);
  if (!to) throw new Error(`no master but ${from} has a replica`);
  const src = cluster.node(from);
  const dst = cluster.node(to);
  try {
    const srcId = (await src.call('CLUSTER', 'MYID')) as string;
    const dstId = (await dst.call('CLUSTER', 'MYID')) as string;
    await dst.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', srcId);
    await src.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', dstId);
    let moved = 0;
    for (;;) {
      const keys = (await src.call('CLUSTER', 'GETKEYSINSLOT', slot, 20)) as string[];
      if (keys.length === 0) break;
      const [host, port] = to.split(':');
      await src.call('MIGRATE', host!, port!, '', 0, 5000, 'KEYS', ...keys);
      moved += keys.length;
      // Slowly, so calls run while the slot is half here, half there (ASK, TRYAGAIN).
      await new Promise((r) => setTimeout(r, 20));
    }
    for (const address of all) {
      const node = cluster.node(address);
      await node.call('CLUSTER', 'SETSLOT', slot, 'NODE', dstId);
      node.disconnect();
    }
    return { from, to, keys: moved };
  } finally {
    src.disconnect();
    dst.disconnect();
  }
}

describe('on a Redis Cluster', () => {
  it('toolgate keys sit in the slot of {prefix}, so BullMQ and its transactions work; memory spreads per client', async () => {
    const { stack, prefix, slot } = await clusterStack();
    try {
      const ok = await stack.call('/tools/calculator/execute', { json: { expression: '6*7' } });
      expect(await ok.json()).toMatchObject({ status: 'ok', result: 42 });
      const saved = await stack.call('/tools/memory_save/execute', {
        json: { text: 'the cluster test was here', tags: ['cluster'] },
      });
      expect((await saved.json()) as { status: string }).toMatchObject({ status: 'ok' });
      const bobSaved = await stack.call('/tools/memory_save/execute', {
        key: KEYS.bob,
        json: { text: 'bob was here too' },
      });
      expect(bobSaved.status).toBe(200);

      // Everything toolgate keeps together (queue, records, stats, index) is on one master...
      const tagged = await keysByMaster(`{${prefix}}:`);
      expect(tagged.size).toBe(1);
      const [owner, keys] = [...tagged][0]!;
      expect(owner).toBe(await cluster.ownerOf(slot));
      expect(keys).toEqual(expect.arrayContaining([`{${prefix}}:fast:meta`]));
      expect(keys.some((k) => k.startsWith(`{${prefix}}:call:`))).toBe(true);
      // ...and each client's memory in its own slot, tagged by client.
      const memory = [...(await keysByMaster(`${prefix}:memory:`)).values()].flat();
      expect(memory).toEqual(
        expect.arrayContaining([`${prefix}:memory:{alice}`, `${prefix}:memory:{bob}`]),
      );
      expect(await keySlot(cluster, `${prefix}:memory:{alice}`)).toBe(
        await keySlot(cluster, `${prefix}:memory:{alice}:v`),
      );
    } finally {
      await stack.close();
    }
  });

  it('a master failover during calls loses no accepted call', async () => {
    // An accepted call is on the replica before it is answered (redis.durability), so the
    // failover cannot take it back. The promoted master has no replica left: its WAITs time
    // out (250 ms here) and calls slow down until one is added.
    const { stack, slot } = await clusterStack({ replicas: 1, timeoutMs: 250 });
    try {
      const load = startCallLoad(stack.url, KEYS.alice, { loops: 4 });
      await new Promise((r) => setTimeout(r, 1500));
      const owner = await cluster.ownerOf(slot);
      const victim = cluster.servers.find((s) => `127.0.0.1:${s.port}` === owner)!;
      const killedAt = Date.now() - load.started;
      victim.child.kill('SIGKILL');
      const readiness: { sent: number; status: number }[] = [];
      let probing = true;
      const probes = (async () => {
        while (probing) {
          const sent = Date.now() - load.started;
          readiness.push({ sent, status: (await fetch(`${stack.url}/readyz`)).status });
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      // The replica is promoted after cluster-node-timeout (1 s) and an election.
      await cluster.waitHealthy(30_000, slot);
      const promotedAt = Date.now() - load.started;
      await new Promise((r) => setTimeout(r, 3000));
      const answers = await load.stop();
      probing = false;
      await probes;
      // /readyz reads toolgate's slot, waiting up to 2 s for it: a probe sent more than that
      // before the promotion told of the outage (there was one unless the promotion came within
      // 2 s of the kill), and the last probe found the slot served again.
      // (600 ms: the promotion is noticed here a poll or two after it happens.)
      const early = readiness.filter((r) => r.sent + 2000 + 600 < promotedAt);
      expect(
        early.filter((r) => r.status !== 503),
        JSON.stringify({ killedAt, promotedAt, readiness }),
      ).toEqual([]);
      if (promotedAt - killedAt > 2700) expect(early.length).toBeGreaterThan(0);
      expect(readiness.at(-1)?.status).toBe(200);

      const accepted = answers.filter((a) => a.id !== undefined);
      const refused = answers.filter((a) => a.id === undefined);
      const finals = await finalStatuses(
        stack.url,
        KEYS.alice,
        accepted.map((a) => a.id!),
      );
      // `sleep` is not idempotent: one that was starting as the master died, before its start
      // reached a replica, is not run (it could run twice) and ends worker_error, said so.
      const notRun = [...finals].filter(([id, end]) => {
        const answer = accepted.find((a) => a.id === id)!;
        return (
          end.code === 'worker_error' && answer.kind === 'async' && answer.at <= promotedAt + 1000
        );
      });
      const notOk = [...finals].filter(
        ([id, end]) => end.status !== 'ok' && !notRun.some(([n]) => n === id),
      );
      const resumed = longestStall(answers, killedAt);
      console.warn(
        `cluster failover: ${accepted.length} calls accepted, ${refused.length} refused ` +
          `(${[...new Set(refused.map((r) => `${r.httpStatus} ${r.code ?? ''}`))].join(', ')}); ` +
          `replica promoted ${promotedAt - killedAt} ms after the kill; the longest stall of calls ${resumed} ms; ` +
          `${notRun.length} non-idempotent calls starting at the kill not run`,
      );
      expect(accepted.length).toBeGreaterThan(50);
      expect(notOk).toEqual([]);
      // Refused while the slot had no master, or while the backlog of slowed calls was full:
      // a clear 503 or 429 the client can retry, never a 500.
      for (const r of refused) {
        expect(['503 unavailable', '429 too_many_in_flight']).toContain(
          `${r.httpStatus} ${r.code}`,
        );
        expect(r.retryAfter).toMatch(/^\d+$/);
      }
      expect(resumed).toBeLessThan(10_000);
      // Calls after the failover run as before.
      const after = await stack.call('/tools/calculator/execute', { json: { expression: '1+2' } });
      expect(await after.json()).toMatchObject({ status: 'ok', result: 3 });
    } finally {
      await stack.close();
    }
  }, 90_000);

  it('moving toolgate slot to another master (resharding) during calls loses no accepted call', async () => {
    // With redis.durability on: each WAIT goes with its marker key, which moves with the slot
    // (ASK while it is half moved), and the new owner's replica confirms from then on.
    const { stack, slot } = await clusterStack({ replicas: 1, timeoutMs: 1000 });
    try {
      // From a master with a replica too, else every WAIT before the move would time out.
      if (!(await masters()).replicated.includes(await cluster.ownerOf(slot)))
        await migrateSlot(slot);
      const load = startCallLoad(stack.url, KEYS.alice, { loops: 4 });
      await new Promise((r) => setTimeout(r, 1000));
      const started = Date.now() - load.started;
      const moved = await migrateSlot(slot);
      const took = Date.now() - load.started - started;
      await new Promise((r) => setTimeout(r, 1500));
      const answers = await load.stop();

      expect(moved.to).toBe(await cluster.ownerOf(slot));
      const accepted = answers.filter((a) => a.id !== undefined);
      const refused = answers.filter((a) => a.id === undefined);
      const finals = await finalStatuses(
        stack.url,
        KEYS.alice,
        accepted.map((a) => a.id!),
      );
      console.warn(
        `cluster resharding: moved ${moved.keys} keys of slot ${slot} in ${took} ms; ` +
          `${accepted.length} calls accepted, ${refused.length} refused; the longest stall of ` +
          `calls ${longestStall(answers, started)} ms`,
      );
      // Each call that did not end ok, as its record says (with the reason).
      const notOk = await Promise.all(
        [...finals]
          .filter(([, end]) => end.status !== 'ok')
          .map(async ([id]) => {
            const res = await fetch(`${stack.url}/v1/calls/${id}`, {
              headers: { authorization: `Bearer ${KEYS.alice}` },
            });
            return res.json();
          }),
      );
      expect(notOk).toEqual([]);
      for (const r of refused) expect(r).toMatchObject({ httpStatus: 503, code: 'unavailable' });
      expect(accepted.length).toBeGreaterThan(50);
      // Every accepted call was confirmed on a replica: none went on with its WAIT timed out.
      const metrics = await (await fetch(stack.metricsUrl)).text();
      expect(metrics).toMatch(/^toolgate_redis_unreplicated_total\{service="gateway"\} 0$/m);
    } finally {
      await stack.close();
    }
  }, 90_000);
});
