// `bench:scaling --shards 1,3` (issue 31): the calculator load from 30 clients, default-hashed
// over 1, then 3 redis-server shards (no pinning), with one gateway and one worker serving every
// shard. Per master: its share of the calls, its CPU per call, its idle CPU, and the Redis
// connections each process keeps to it (CLIENT LIST, matched to the process's sockets in /proc):
// what one more master buys, and what every gateway and worker pays per shard for it
// (docs/scaling.md, "Several masters").
import { spawn, type ChildProcess } from 'node:child_process';
import {
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { ShardMap, parseConfig } from '@toolgate/config';
import { freePort, percentile } from '../lib.js';
import { processCpu, redisCpuMs } from './cpu.js';
import { Fleet } from './fleet.js';

const CLIENTS = 30;
const env = process.env;
const warmUpSeconds = Number(env.BENCH_WARMUP_SECONDS ?? 3);
const seconds = Number(env.BENCH_CALC_SECONDS ?? 8);
const idleSeconds = Number(env.BENCH_IDLE_SECONDS ?? 3);
const body = JSON.stringify({ expression: '2*(3+4)' });
const keyOf = (i: number) => `shard-bench-key-${String(i).padStart(2, '0')}-0123456789abcdef`;
const idOf = (i: number) => `tenant-${String(i).padStart(2, '0')}`;
/** How the clients are placed: by the default hash, or evenly by pinning (`clients[].shard`). */
const placement = env.BENCH_PLACEMENT === 'even' ? 'even' : 'hash';

/** `--shards 1,3` from the command line: the shard counts to run, or undefined without it. */
export function shardCounts(argv: string[]): number[] | undefined {
  const at = argv.findIndex((a) => a === '--shards' || a.startsWith('--shards='));
  if (at < 0) return undefined;
  const value = argv[at]!.includes('=') ? argv[at]!.split('=')[1] : argv[at + 1];
  const counts = (value ?? '').split(',').map((c) => Number(c.trim()));
  if (counts.length === 0 || counts.some((n) => !Number.isInteger(n) || n < 1 || n > 16))
    throw new Error(`--shards: "${value ?? ''}" is not a list of shard counts 1–16, e.g. 1,3`);
  return counts;
}

interface Master {
  id: string;
  port: number;
  child: ChildProcess;
  redis: Redis;
}

interface MasterResult {
  id: string;
  clients: number;
  calls: number;
  share: number;
  /** Redis CPU per call of this master's own clients, µs. */
  redisUsPerCall: number;
  /** Redis CPU with no calls, ms per second. */
  idleMsPerS: number;
  gatewayConnections: number;
  workerConnections: number;
}

interface ShardStep {
  shards: number;
  callsPerSecond: number;
  p50Ms: number;
  failed: number;
  masters: MasterResult[];
  gatewayMsPerCall: number;
  workerMsPerCall: number;
  gatewayIdleMsPerS: number;
  workerIdleMsPerS: number;
  /** With more than one shard: the last master killed under load (outagePhase). */
  outage?: Outage;
}

/** The other shards' clients before and during one master's outage. */
interface Outage {
  victim: string;
  beforeP50: number;
  beforeP99: number;
  duringP50: number;
  duringP99: number;
  /** Calls of the other shards' clients not answered 200 ok, from the kill on. */
  othersFailed: number;
  othersDuring: number;
  /** The victim's clients' answers from the kill on: 503 shard_unavailable, and anything else. */
  victimRefused: number;
  victimOther: number;
  /** The other answers by status and error code, e.g. `503 unavailable: 2`. */
  victimOtherKinds: Record<string, number>;
}

async function startMaster(id: string): Promise<Master> {
  const port = await freePort();
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  const redis = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: null });
  redis.on('error', () => undefined); // the outage phase kills one: its reconnects fail
  await redis.ping();
  return { id, port, child, redis };
}

/** Socket inodes a process holds. */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** The inode of each local TCP port (IPv4, this network namespace). */
function inodeByLocalPort(): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    out.set(parseInt(f[1]!.split(':')[1]!, 16), f[9]!);
  }
  return out;
}

/** How many of a master's clients (CLIENT LIST) are connections of `pid`. */
async function connectionsOf(master: Master, pid: number): Promise<number> {
  const list = (await master.redis.client('LIST')) as string;
  const ports = [...list.matchAll(/\baddr=[^ ]*:(\d+) /g)].map((m) => Number(m[1]));
  const inodes = socketInodes(pid);
  const byPort = inodeByLocalPort();
  return ports.filter((p) => inodes.has(byPort.get(p) ?? '')).length;
}

async function run(
  shards: number,
  dir: string,
  progress: (line: string) => void,
  setRunning: (i: autocannon.Instance | undefined) => void,
): Promise<ShardStep> {
  const masters: Master[] = [];
  for (let i = 0; i < shards; i++) masters.push(await startMaster(`r${i}`));
  const document = {
    redis: {
      prefix: 'bench-shards',
      shards: masters.map((m, i) => ({
        id: m.id,
        url: `redis://127.0.0.1:${m.port}`,
        ...(i === 0 ? { home: true } : {}),
      })),
    },
    // Default-hashed: no client names a shard (BENCH_PLACEMENT=even: client i on shard i mod
    // N). Limits out of the way, as in the main bench.
    clients: Array.from({ length: CLIENTS }, (_, i) => ({
      id: idOf(i),
      key: keyOf(i),
      ...(placement === 'even' ? { shard: masters[i % masters.length]!.id } : {}),
      rateLimit: { perMinute: 100_000_000 },
      limits: { queued: 100_000 },
    })),
    log: { level: 'warn' },
    worker: { sandboxConcurrency: 1 },
    sandbox: {
      driver: 'bwrap',
      workspacesRoot: join(dir, `workspaces-${shards}`),
      stateDir: join(dir, `state-${shards}`),
      pool: { size: 1 },
    },
  };
  const map = new ShardMap(parseConfig(document, {}));
  const shardOfClient = Array.from({ length: CLIENTS }, (_, i) => map.of(idOf(i)).id);
  const configFile = join(dir, `toolgate-${shards}.yaml`);
  writeFileSync(configFile, JSON.stringify(document, null, 2)); // JSON is YAML
  const fleet = new Fleet(
    { TOOLGATE_CONFIG: configFile, HOST: '127.0.0.1', TOOLGATE_LOG_LEVEL: 'info' },
    join(dir, `workspaces-${shards}`),
    progress,
  );
  try {
    await fleet.scaleTo(1, 1);
    const gateway = fleet.gateways[0]!;
    const worker = fleet.workers[0]!;
    progress(
      `${shards} shard(s): ${warmUpSeconds} s warm-up + ${seconds} s, ${CLIENTS} clients, one connection each`,
    );
    const callsBy = new Array<number>(CLIENTS).fill(0);
    const latencies: number[] = [];
    const clientIndex = new Map<unknown, number>();
    let nextClient = 0;
    let measuring = false;
    let failedInWindow = 0;
    const instance = autocannon({
      url: `${gateway.url}/tools/calculator/execute`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      connections: CLIENTS,
      duration: warmUpSeconds + seconds + 1,
      timeout: 30,
      // One connection per client: connection i calls with client i's key.
      setupClient: (client) => {
        const i = nextClient++ % CLIENTS;
        clientIndex.set(client, i);
        client.setHeaders({
          authorization: `Bearer ${keyOf(i)}`,
          'content-type': 'application/json',
        });
      },
    }) as Promise<autocannon.Result> & autocannon.Instance;
    instance.on('response', (client: unknown, status: number, _bytes: number, ms: number) => {
      if (!measuring) return;
      if (status !== 200) {
        failedInWindow++;
        return;
      }
      callsBy[clientIndex.get(client)!]!++;
      latencies.push(ms);
    });
    setRunning(instance);
    const read = async () => ({
      at: performance.now(),
      redisMs: await Promise.all(masters.map((m) => redisCpuMs(m.redis))),
      gateway: processCpu(gateway.pid)!.ownMs,
      worker: processCpu(worker.pid)!.ownMs,
    });
    await new Promise((r) => setTimeout(r, warmUpSeconds * 1000));
    const before = await read();
    measuring = true;
    await new Promise((r) => setTimeout(r, seconds * 1000));
    measuring = false;
    const after = await read();
    const result = await instance;
    setRunning(undefined);

    // Connections while calls run and right after: every one the processes keep.
    const connections = await Promise.all(
      masters.map(async (m) => ({
        gateway: await connectionsOf(m, gateway.pid),
        worker: await connectionsOf(m, worker.pid),
      })),
    );
    progress(`${shards} shard(s): ${idleSeconds} s idle`);
    await new Promise((r) => setTimeout(r, 1000)); // the last calls' records settle
    const idle0 = await read();
    await new Promise((r) => setTimeout(r, idleSeconds * 1000));
    const idle1 = await read();
    const idleS = (idle1.at - idle0.at) / 1000;

    const total = callsBy.reduce((a, b) => a + b, 0);
    const measured = (after.at - before.at) / 1000;
    latencies.sort((a, b) => a - b);
    const masterResults = masters.map((m, i): MasterResult => {
      const mine = shardOfClient.map((s, c) => (s === m.id ? c : -1)).filter((c) => c >= 0);
      const calls = mine.reduce((sum, c) => sum + callsBy[c]!, 0);
      return {
        id: m.id,
        clients: mine.length,
        calls,
        share: calls / (total || 1),
        redisUsPerCall: ((after.redisMs[i]! - before.redisMs[i]!) * 1000) / (calls || NaN),
        idleMsPerS: (idle1.redisMs[i]! - idle0.redisMs[i]!) / idleS,
        gatewayConnections: connections[i]!.gateway,
        workerConnections: connections[i]!.worker,
      };
    });
    const step: ShardStep = {
      shards,
      callsPerSecond: total / measured,
      p50Ms: percentile(latencies, 50),
      failed: result.errors + result.timeouts + result.non2xx + failedInWindow,
      masters: masterResults,
      gatewayMsPerCall: (after.gateway - before.gateway) / (total || NaN),
      workerMsPerCall: (after.worker - before.worker) / (total || NaN),
      gatewayIdleMsPerS: (idle1.gateway - idle0.gateway) / idleS,
      workerIdleMsPerS: (idle1.worker - idle0.worker) / idleS,
    };
    progress(
      `${shards} shard(s): ${step.callsPerSecond.toFixed(0)} calls/s, p50 ${step.p50Ms.toFixed(1)} ms, ${step.failed} failed`,
    );
    if (shards > 1 && env.BENCH_OUTAGE !== '0') {
      step.outage = await outagePhase(gateway.url, masters.at(-1)!, shardOfClient, progress);
      setRunning(undefined);
    }
    return step;
  } finally {
    await fleet.close();
    for (const m of masters) {
      m.redis.disconnect();
      m.child.kill('SIGTERM');
    }
  }
}

/**
 * The load again, and halfway through `kill -9` of one master (not the home one): the latency
 * of the other shards' clients before and during its outage, which calls of theirs failed
 * (none may), and what its own clients were told (503 shard_unavailable).
 */
async function outagePhase(
  url: string,
  victim: Master,
  shardOfClient: string[],
  progress: (line: string) => void,
): Promise<Outage> {
  progress(`outage: ${seconds} s of load, ${victim.id} killed (-9) after ${seconds / 2} s`);
  const before: number[] = [];
  const during: number[] = [];
  let killed = false;
  const out = { othersFailed: 0, victimRefused: 0, victimOther: 0 };
  const kinds: Record<string, number> = {};
  let nextClient = 0;
  const clientIndex = new Map<unknown, number>();
  const bodies = new Map<unknown, string>();
  const instance = autocannon({
    url: `${url}/tools/calculator/execute`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    connections: CLIENTS,
    duration: seconds + 1,
    timeout: 30,
    setupClient: (client) => {
      const i = nextClient++ % CLIENTS;
      clientIndex.set(client, i);
      client.setHeaders({
        authorization: `Bearer ${keyOf(i)}`,
        'content-type': 'application/json',
      });
      client.on('body', (b: Buffer) => bodies.set(client, b.toString()));
    },
  }) as Promise<autocannon.Result> & autocannon.Instance;
  instance.on('response', (client: unknown, status: number, _bytes: number, ms: number) => {
    const mine = shardOfClient[clientIndex.get(client)!] === victim.id;
    if (mine) {
      if (!killed) return;
      const text = bodies.get(client) ?? '';
      if (status === 503 && text.includes('shard_unavailable')) out.victimRefused++;
      else {
        out.victimOther++;
        const kind = `${status} ${/"code":"([a-z_]+)"/.exec(text)?.[1] ?? ''}`.trim();
        kinds[kind] = (kinds[kind] ?? 0) + 1;
      }
      return;
    }
    if (status !== 200) {
      if (killed) out.othersFailed++;
      return;
    }
    (killed ? during : before).push(ms);
  });
  await new Promise((r) => setTimeout(r, (seconds / 2) * 1000));
  victim.child.kill('SIGKILL');
  killed = true;
  await instance;
  before.sort((a, b) => a - b);
  during.sort((a, b) => a - b);
  const outage: Outage = {
    victim: victim.id,
    beforeP50: percentile(before, 50),
    beforeP99: percentile(before, 99),
    duringP50: percentile(during, 50),
    duringP99: percentile(during, 99),
    othersDuring: during.length,
    ...out,
    victimOtherKinds: kinds,
  };
  progress(
    `outage: the others' p50 ${outage.beforeP50.toFixed(1)} → ${outage.duringP50.toFixed(1)} ms, ${out.othersFailed} failed; ${victim.id}'s clients ${out.victimRefused} shard_unavailable, ${out.victimOther} other`,
  );
  return outage;
}

function report(steps: ShardStep[]): string[] {
  const lines = [
    '| shards | master | clients | calls | share (even) | Redis µs/call | Redis idle ms/s | gateway conns | worker conns |',
    '| -----: | ------ | ------: | ----: | -----------: | ------------: | --------------: | ------------: | -----------: |',
  ];
  for (const s of steps) {
    for (const m of s.masters) {
      lines.push(
        `| ${s.shards} | ${m.id} | ${m.clients} | ${m.calls} | ${(m.share * 100).toFixed(1)} % (${(100 / s.shards).toFixed(1)} %) | ` +
          `${m.redisUsPerCall.toFixed(0)} | ${m.idleMsPerS.toFixed(2)} | ${m.gatewayConnections} | ${m.workerConnections} |`,
      );
    }
  }
  lines.push('');
  lines.push(
    '| shards | calls/s | p50 ms | failed | gateway ms/call | worker ms/call | gateway idle ms/s | worker idle ms/s | worst share off even |',
  );
  lines.push(
    '| -----: | ------: | -----: | -----: | --------------: | -------------: | ----------------: | ---------------: | -------------------: |',
  );
  for (const s of steps) {
    const worst = Math.max(...s.masters.map((m) => Math.abs(m.share * s.shards - 1)));
    lines.push(
      `| ${s.shards} | ${s.callsPerSecond.toFixed(0)} | ${s.p50Ms.toFixed(1)} | ${s.failed} | ` +
        `${s.gatewayMsPerCall.toFixed(3)} | ${s.workerMsPerCall.toFixed(3)} | ` +
        `${s.gatewayIdleMsPerS.toFixed(2)} | ${s.workerIdleMsPerS.toFixed(2)} | ${(worst * 100).toFixed(0)} % |`,
    );
  }
  for (const s of steps) {
    const o = s.outage;
    if (!o) continue;
    lines.push('');
    lines.push(
      `outage (${s.shards} shards, ${o.victim} killed -9 halfway): the other shards' clients ` +
        `p50 ${o.beforeP50.toFixed(1)} → ${o.duringP50.toFixed(1)} ms (${(o.duringP50 / o.beforeP50).toFixed(2)}×), ` +
        `p99 ${o.beforeP99.toFixed(1)} → ${o.duringP99.toFixed(1)} ms (${(o.duringP99 / o.beforeP99).toFixed(2)}×), ` +
        `${o.othersFailed} of ${o.othersDuring + o.othersFailed} calls failed; ${o.victim}'s clients: ` +
        `${o.victimRefused} answered 503 shard_unavailable, ${o.victimOther} otherwise` +
        `${
          o.victimOther > 0
            ? ` (${Object.entries(o.victimOtherKinds)
                .map(([k, n]) => `${k}: ${n}`)
                .join(', ')})`
            : ''
        }` +
        ' (target: the others within 2×, none failed)',
    );
  }
  const [one, more] = [steps.find((s) => s.shards === 1), steps.find((s) => s.shards > 1)];
  if (one && more) {
    const extra = more.shards - 1;
    const per = (a: number, b: number) => ((b - a) / extra).toFixed(2);
    const conns = (s: ShardStep, k: 'gatewayConnections' | 'workerConnections') =>
      s.masters.reduce((sum, m) => sum + m[k], 0);
    lines.push('');
    lines.push(
      `per shard added (1 → ${more.shards}): gateway +${per(conns(one, 'gatewayConnections'), conns(more, 'gatewayConnections'))} ` +
        `and worker +${per(conns(one, 'workerConnections'), conns(more, 'workerConnections'))} Redis connections; ` +
        `idle CPU gateway +${per(one.gatewayIdleMsPerS, more.gatewayIdleMsPerS)} ms/s, worker +${per(one.workerIdleMsPerS, more.workerIdleMsPerS)} ms/s`,
    );
  }
  return lines;
}

/** Runs the shard steps; the exit code (0: no call failed). */
export async function runShardBench(counts: number[]): Promise<number> {
  const started = performance.now();
  const progress = (line: string) =>
    process.stderr.write(
      `[scaling --shards +${((performance.now() - started) / 1000).toFixed(0)}s] ${line}\n`,
    );
  if (env.REDIS_URL)
    throw new Error('--shards starts its own redis-server per shard: unset REDIS_URL');
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-scaling-shards-'));
  let running: autocannon.Instance | undefined;
  process.once('SIGINT', () => {
    running?.stop();
  });
  const steps: ShardStep[] = [];
  const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const loadBefore = load();
  try {
    for (const n of counts)
      steps.push(
        await run(n, dir, progress, (i) => {
          running = i;
        }),
      );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(
    `toolgate scaling over Redis shards — 1 gateway, 1 worker, ${CLIENTS} clients ${placement === 'even' ? 'pinned evenly' : 'default-hashed'} ` +
      `(one connection each), calculator; ${warmUpSeconds} s warm-up, ${seconds} s measured, ` +
      `${idleSeconds} s idle; load average ${loadBefore} before, ${load()} after`,
  );
  console.log('');
  for (const line of report(steps)) console.log(line);
  return steps.every((s) => s.failed === 0 && (s.outage?.othersFailed ?? 0) === 0) ? 0 : 1;
}
