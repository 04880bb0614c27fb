/**
 * A real Redis Cluster for tests: `redis-server --cluster-enabled yes` processes joined by
 * `redis-cli --cluster create`, on loopback, in a temporary directory. Masters each get a
 * replica, so a test can kill a master and watch its replica take over; or none, with
 * `fullCoverage: false`, so a dead master's slots stay down while the others answer.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort, startRedisServer, type RedisServer } from './redis-server.js';

const run = promisify(execFile);

export interface RedisCluster {
  /** `127.0.0.1:port` of every node, masters first. */
  nodes: string[];
  servers: RedisServer[];
  /** The nodes whose process runs (a test may have killed some). */
  live(): string[];
  /** The node (`127.0.0.1:port`) that serves `slot` now. */
  ownerOf(slot: number): Promise<string>;
  /** A plain connection to one node (for CLUSTER commands); the caller disconnects it. */
  node(address: string): Redis;
  /**
   * Waits until every live node reports `cluster_state:ok` and agrees that a live node serves
   * `slot` (after a master is killed: until its replica has taken over).
   */
  waitHealthy(timeoutMs?: number, slot?: number): Promise<void>;
  stop(): Promise<void>;
}

/** The slot of a key (CRC16 of its hash tag, as Redis computes it). */
export async function keySlot(cluster: RedisCluster, key: string): Promise<number> {
  const any = cluster.node(cluster.live()[0]!);
  try {
    return (await any.call('CLUSTER', 'KEYSLOT', key)) as number;
  } finally {
    any.disconnect();
  }
}

export async function startRedisCluster(
  options: {
    masters?: number;
    replicas?: number;
    /**
     * `cluster-require-full-coverage` (Redis's default: yes, the whole cluster refuses commands
     * while any slot has no live master). `false`: the other masters go on serving their slots.
     */
    fullCoverage?: boolean;
  } = {},
): Promise<RedisCluster> {
  const masters = options.masters ?? 3;
  const replicas = options.replicas ?? 1;
  const fullCoverage = options.fullCoverage ?? true;
  const dir = mkdtempSync(join(tmpdir(), 'tg-cluster-'));
  const servers: RedisServer[] = [];
  try {
    for (let i = 0; i < masters * (1 + replicas); i++) {
      const port = await freePort();
      // The cluster bus port too: by default it is port + 10000, which for an ephemeral port
      // above 55535 does not exist, and otherwise may be taken.
      const busPort = await freePort();
      servers.push(
        await startRedisServer(port, [
          '--cluster-enabled',
          'yes',
          '--cluster-port',
          String(busPort),
          '--cluster-config-file',
          `nodes-${port}.conf`,
          // Failover in about a second: a dead master is noticed after the node timeout,
          // then its replica is elected.
          '--cluster-node-timeout',
          '1000',
          '--dir',
          dir,
          // Each node its own files: a replica's full sync writes the RDB it loads.
          '--dbfilename',
          `dump-${port}.rdb`,
          // A replica that never synced cannot be promoted: sync at once, not after 5 s.
          '--repl-diskless-sync-delay',
          '0',
          '--cluster-require-full-coverage',
          fullCoverage ? 'yes' : 'no',
        ]),
      );
    }
    const nodes = servers.map((s) => `127.0.0.1:${s.port}`);
    await run('redis-cli', [
      '--cluster',
      'create',
      ...nodes,
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ]);
    const node = (address: string) => {
      const [host, port] = address.split(':');
      const redis = new Redis(Number(port), host!, { maxRetriesPerRequest: 1, lazyConnect: false });
      redis.on('error', () => undefined);
      return redis;
    };
    const live = () =>
      servers
        .filter((s) => s.child.exitCode === null && s.child.signalCode === null)
        .map((s) => `127.0.0.1:${s.port}`);
    const ownerSeenBy = async (address: string, slot: number) => {
      const redis = node(address);
      try {
        const ranges = (await redis.call('CLUSTER', 'SLOTS')) as [
          number,
          number,
          [string, number],
        ][];
        const range = ranges.find(([from, to]) => slot >= from && slot <= to);
        return range ? `${range[2][0]}:${range[2][1]}` : undefined;
      } finally {
        redis.disconnect();
      }
    };
    const cluster: RedisCluster = {
      nodes,
      servers,
      node,
      live,
      ownerOf: async (slot) => {
        const owner = await ownerSeenBy(live()[0]!, slot);
        if (!owner) throw new Error(`no node serves slot ${slot}`);
        return owner;
      },
      async waitHealthy(timeoutMs = 30_000, slot = 0) {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const states = await Promise.all(
            live().map(async (address) => {
              const redis = node(address);
              try {
                const info = (await redis.call('CLUSTER', 'INFO')) as string;
                return /cluster_state:ok/.test(info) ? await ownerSeenBy(address, slot) : undefined;
              } catch {
                return undefined;
              } finally {
                redis.disconnect();
              }
            }),
          );
          const alive = live();
          if (states.every((s) => s !== undefined && s === states[0] && alive.includes(s))) return;
          if (Date.now() > deadline)
            throw new Error(`cluster not healthy after ${timeoutMs} ms: ${states.join(', ')}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      },
      async stop() {
        await Promise.all(servers.map((s) => s.stop()));
        rmSync(dir, { recursive: true, force: true });
      },
    };
    await cluster.waitHealthy();
    // Replicas in sync, so a test may kill a master right away.
    for (const address of nodes) {
      const redis = node(address);
      try {
        for (let i = 0; ; i++) {
          const info = (await redis.call('INFO', 'replication')) as string;
          if (!/role:slave/.test(info) || /master_link_status:up/.test(info)) break;
          if (i > 300) throw new Error(`replica ${address} did not sync`);
          await new Promise((r) => setTimeout(r, 50));
        }
      } finally {
        redis.disconnect();
      }
    }
    return cluster;
  } catch (err) {
    await Promise.all(servers.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
