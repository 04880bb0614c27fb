/**
 * A real Redis Sentinel set for tests: one master, its replicas and three sentinels, each a
 * redis-server process on loopback with its config file in a temp dir, stopped by pid. The
 * sentinels declare a master down after 1 s (by default), so a failover takes a few seconds.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, untilRedisAnswers } from './redis-server.js';

export const MASTER_NAME = 'toolgate';

export interface RedisNode {
  port: number;
  child: ChildProcess;
  exited: Promise<void>;
}

export interface SentinelSet {
  name: string;
  master: RedisNode;
  replicas: RedisNode[];
  sentinels: RedisNode[];
  /** `host:port` of each sentinel, as `redis.sentinel.nodes` wants them. */
  nodes: string[];
  /** The master's port as the sentinels report it now. */
  masterPort(): Promise<number>;
  /** Stops every process still running (SIGKILL, by pid) and removes the temp dir. */
  stop(): Promise<void>;
}

/**
 * Debian ships the sentinel as `redis-sentinel` (its own package, a link to redis-server);
 * without it, `redis-server <file> --sentinel` is the same program in sentinel mode.
 */
function sentinelCommand(file: string): [string, string[]] {
  const found = spawnSync('redis-sentinel', ['--version'], { stdio: 'ignore' });
  return found.error ? ['redis-server', [file, '--sentinel']] : ['redis-sentinel', [file]];
}

function startNode(command: string, args: string[], port: number): RedisNode {
  const child = spawn(command, args, { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('error', () => undefined);
  return { port, child, exited };
}

/**
 * Starts the set and resolves once every sentinel sees the master, all its replicas and the
 * other sentinels (quorum and majority reachable: a failover can be authorized).
 */
export async function startSentinelSet(
  options: {
    replicas?: number;
    /**
     * `down-after-milliseconds` (default 1000). On a busy machine 1 s can be too short for a
     * sentinel's first PING to the master it just switched to: it declares that one down too
     * and fails over again, to a replica that may not have synced yet.
     */
    downAfterMs?: number;
  } = {},
): Promise<SentinelSet> {
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-sentinel-'));
  const all: RedisNode[] = [];
  const killAll = () => {
    for (const n of all)
      if (n.child.exitCode === null && n.child.signalCode === null) n.child.kill('SIGKILL');
  };
  // Also when the test process ends without running its hooks (a hook timed out and vitest
  // tore the worker down): redis processes must not outlive it.
  process.once('exit', killAll);
  const stop = async () => {
    process.off('exit', killAll);
    killAll();
    await Promise.all(all.map((n) => n.exited));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const server = async (extra: string[]) => {
      const port = await freePort();
      // Each server its own dir: a replica's full sync renames its download to `dump.rdb`
      // there and loads it; two replicas syncing at once in one dir could load each other's.
      const own = join(dir, String(port));
      mkdirSync(own);
      const node = startNode(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--save',
          '',
          '--appendonly',
          'no',
          // A replica's full sync goes through a file: in the temp dir, not the cwd.
          '--dir',
          own,
          // The new master syncs a replica at once, not after the default 5 s.
          '--repl-diskless-sync-delay',
          '0',
          ...extra,
        ],
        port,
      );
      all.push(node);
      await untilRedisAnswers(node.port, node.child, 'redis-server');
      return node;
    };
    const master = await server([]);
    const replicas: RedisNode[] = [];
    for (let i = 0; i < (options.replicas ?? 1); i++) {
      replicas.push(
        await server([
          '--replicaof',
          '127.0.0.1',
          String(master.port),
          '--replica-announce-ip',
          '127.0.0.1',
        ]),
      );
    }
    const sentinels: RedisNode[] = [];
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      // Sentinel rewrites its file (what it learned, its id): one writable file each.
      const file = join(dir, `sentinel-${port}.conf`);
      writeFileSync(
        file,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${master.port} 2`,
          `sentinel down-after-milliseconds ${MASTER_NAME} ${options.downAfterMs ?? 1000}`,
          `sentinel failover-timeout ${MASTER_NAME} 5000`,
          `sentinel parallel-syncs ${MASTER_NAME} 1`,
          '',
        ].join('\n'),
      );
      const [command, args] = sentinelCommand(file);
      const node = startNode(command, args, port);
      all.push(node);
      await untilRedisAnswers(node.port, node.child, 'redis-sentinel');
      sentinels.push(node);
    }
    const wanted = replicas.length;
    for (const s of sentinels) {
      const probe = new Redis(s.port, '127.0.0.1', { maxRetriesPerRequest: 1 });
      probe.on('error', () => undefined);
      try {
        for (let i = 0; ; i++) {
          const info = fields((await probe.call('SENTINEL', 'MASTER', MASTER_NAME)) as string[]);
          if (Number(info['num-slaves']) >= wanted && Number(info['num-other-sentinels']) >= 2)
            break;
          if (i > 150)
            throw new Error(`sentinel ${s.port} never saw the whole set: ${JSON.stringify(info)}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      } finally {
        probe.disconnect();
      }
    }
    return {
      name: MASTER_NAME,
      master,
      replicas,
      sentinels,
      nodes: sentinels.map((s) => `127.0.0.1:${s.port}`),
      async masterPort() {
        const probe = new Redis(sentinels[0]!.port, '127.0.0.1', { maxRetriesPerRequest: 1 });
        probe.on('error', () => undefined);
        try {
          const [, port] = (await probe.call(
            'SENTINEL',
            'GET-MASTER-ADDR-BY-NAME',
            MASTER_NAME,
          )) as string[];
          return Number(port);
        } finally {
          probe.disconnect();
        }
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** `[k1, v1, k2, v2, …]` as an object (SENTINEL MASTER's reply). */
function fields(flat: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!;
  return out;
}
