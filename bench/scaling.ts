// Issue 14, measured scaling: 1, 2 and 4 worker processes and 1 or 2 gateways against one
// throwaway Redis, each step loaded with calculator calls and with run_python hello world on the
// bwrap driver. Prints calls/s, latency, and the CPU per call of Redis, gateways, workers and
// their sandboxes — the curve, where it bends, and what one Redis master can carry
// (docs/scaling.md reads the figures into a capacity model). With `--shards 1,3`: the same
// calculator load over 1, then 3 Redis shards, per master (scaling/shards.ts).
//
// Each step is one continuous autocannon run: the first BENCH_WARMUP_SECONDS settle it (JIT,
// launcher pools, queue depth), then CPU counters are read, calls are counted for the
// measured seconds, and the counters read again — so nothing from a previous step or the
// ramp-up lands in the figures.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { benchRedis, benchRedisPid, percentile, unmountUnder } from './lib.js';
import { machineCpu, processCpu, redisCommandStats, redisCpuMs } from './scaling/cpu.js';
import { Fleet } from './scaling/fleet.js';
import { commands, curve, redisCeiling, table, type StepResult } from './scaling/report.js';
import { runShardBench, shardCounts } from './scaling/shards.js';

// `--shards 1,3`: the load over several Redis masters instead (scaling/shards.ts).
const shards = shardCounts(process.argv.slice(2));
if (shards) process.exit(await runShardBench(shards));

const env = process.env;
/** Steps as gateways×workers; the fleet grows and shrinks between them in this order. */
const configs = (env.BENCH_CONFIGS ?? '1x1,1x2,1x4,2x4,2x2').split(',').map((c) => {
  const m = /^\s*(\d+)x(\d+)\s*$/.exec(c);
  if (!m || Number(m[1]) < 1 || Number(m[2]) < 1)
    throw new Error(`BENCH_CONFIGS: "${c}" is not <gateways>x<workers>, e.g. 2x4`);
  return { gateways: Number(m[1]), workers: Number(m[2]) };
});
const tools = (env.BENCH_TOOLS ?? 'calculator,run_python').split(',').map((t) => t.trim());
const warmUpSeconds = Number(env.BENCH_WARMUP_SECONDS ?? 3);
const secondsFor = {
  calculator: Number(env.BENCH_CALC_SECONDS ?? 8),
  run_python: Number(env.BENCH_PYTHON_SECONDS ?? 12),
};
const connectionsFor = {
  calculator: Number(env.BENCH_CALC_CONNECTIONS ?? 64),
  // Twice the sandbox slots of 4 workers: a slot never waits for the next call's round trip.
  run_python: Number(env.BENCH_PYTHON_CONNECTIONS ?? 32),
};
/** Seconds without calls per step, to tell Redis's fixed cost (polls, heartbeats) from the per-call one. */
const idleSeconds = Number(env.BENCH_IDLE_SECONDS ?? 3);
const sandboxConcurrency = Number(env.BENCH_SANDBOX_CONCURRENCY ?? 4);
const cores = availableParallelism();

const started = performance.now();
const progress = (line: string) =>
  process.stderr.write(
    `[scaling +${((performance.now() - started) / 1000).toFixed(0)}s] ${line}\n`,
  );

interface ToolLoad {
  body: string;
  /** Every answer is checked; a wrong one counts as failed. */
  verifyBody: (body: string) => boolean;
}
const loads: Record<string, ToolLoad> = {
  calculator: {
    body: JSON.stringify({ expression: '2*(3+4)' }),
    verifyBody: (b) => b.includes('"status":"ok"') && b.includes('"result":14'),
  },
  run_python: {
    body: JSON.stringify({ code: 'print("hello world")' }),
    verifyBody: (b) => b.includes('"status":"ok"') && b.includes('hello world\\n'),
  },
};
for (const tool of tools) {
  if (!(tool in loads))
    throw new Error(`BENCH_TOOLS: unknown tool "${tool}" (calculator, run_python)`);
}
if (tools.includes('run_python')) {
  const why = await whyDriverUnavailable('bwrap');
  if (why) throw new Error(`run_python needs the bwrap driver: ${why}`);
}

const redisUrl = await benchRedis();
const redis = new Redis(redisUrl, { maxRetriesPerRequest: null });
const dir = mkdtempSync(join(tmpdir(), 'toolgate-scaling-'));
// mkdtemp makes it 0700: the sandbox uid must reach the workspaces under it.
chmodSync(dir, 0o755);
const key = 'bench-key-0123456789abcdef';
const config = join(dir, 'toolgate.yaml');
writeFileSync(
  config,
  [
    'clients:',
    // One client, its limits out of the way: the bench measures the backend, not fair sharing.
    `  - { id: bench, key: ${key}, rateLimit: { perMinute: 100000000 }, limits: { queued: 100000, sandboxInFlight: 10000 } }`,
    'log: { level: warn }',
    `worker: { sandboxConcurrency: ${sandboxConcurrency} }`,
    'sandbox:',
    '  driver: bwrap',
    `  workspacesRoot: ${join(dir, 'workspaces')}`,
    `  stateDir: ${join(dir, 'state')}`,
    // One pre-started launcher per sandbox slot: no call waits for a cgroup to be joined.
    `  pool: { size: ${sandboxConcurrency} }`,
  ].join('\n'),
);
const fleet = new Fleet(
  {
    REDIS_URL: redisUrl,
    TOOLGATE_CONFIG: config,
    HOST: '127.0.0.1',
    TOOLGATE_REDIS_PREFIX: 'bench-scaling',
    TOOLGATE_LOG_LEVEL: 'info', // the ready lines are info
  },
  join(dir, 'workspaces'),
  progress,
);

/** The load running now: stopped first on the way out, or the gateways wait for its connections. */
let running: autocannon.Instance | undefined;
let cleaned: Promise<number> | undefined;
/** Stops everything this run started, by pid; returns the sandboxes that had to be killed. */
function cleanUp(): Promise<number> {
  cleaned ??= (async () => {
    running?.stop();
    progress('stopping gateways and workers, removing what is left');
    const left = await fleet.close();
    redis.disconnect();
    if (benchRedisPid !== undefined) process.kill(benchRedisPid, 'SIGTERM');
    unmountUnder(dir); // workspace images stay mounted after their worker, by design
    rmSync(dir, { recursive: true, force: true });
    return left;
  })();
  return cleaned;
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    progress(`${signal}: stopping`);
    void cleanUp().finally(() => process.exit(130));
  });
}

/** Reads every CPU counter the step reports. */
async function snapshot() {
  const cpu = (pids: number[]) => pids.map((pid) => processCpu(pid));
  return {
    at: performance.now(),
    redisMs: await redisCpuMs(redis),
    commands: await redisCommandStats(redis),
    machine: machineCpu(),
    gateways: cpu(fleet.gateways.map((g) => g.pid)),
    workers: cpu(fleet.workers.map((w) => w.pid)),
    loadGen: processCpu(process.pid)!,
  };
}
type Snapshot = Awaited<ReturnType<typeof snapshot>>;

/** Summed CPU growth (ms) between two readings of the same processes. */
function grown(
  before: Snapshot['workers'],
  after: Snapshot['workers'],
  pick: 'ownMs' | 'childrenMs',
): number {
  return before.reduce((sum, b, i) => {
    const a = after[i];
    return b && a ? sum + a[pick] - b[pick] : sum;
  }, 0);
}

async function step(gateways: number, workers: number, tool: string): Promise<StepResult> {
  const seconds = secondsFor[tool as keyof typeof secondsFor];
  const connections = connectionsFor[tool as keyof typeof connectionsFor];
  const load = loads[tool]!;
  progress(
    `${gateways} × ${workers} ${tool}: ${warmUpSeconds} s warm-up + ${seconds} s at ${connections} connections`,
  );
  const latencies: number[] = [];
  let measuring = false;
  let calls = 0;
  let before: Snapshot | undefined;
  let after: Snapshot | undefined;
  let firstFailure: string | undefined;
  /** Answers in the window that were not the expected result (they are not calls done). */
  let wrongInWindow = 0;
  // Without a callback autocannon returns its instance, an EventEmitter that is also a promise.
  const run = autocannon({
    // Connections are spread over the gateways' URLs (autocannon takes a list; its types
    // still say one string).
    url: fleet.gateways.map((g) => `${g.url}/tools/${tool}/execute`) as unknown as string,
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: load.body,
    verifyBody: (body) => {
      const ok = load.verifyBody(String(body));
      if (!ok) {
        firstFailure ??= String(body).slice(0, 400);
        if (measuring) wrongInWindow++;
      }
      return ok;
    },
    connections,
    // A little past the window: the counters are read by the timers below, not at the end.
    duration: warmUpSeconds + seconds + 1,
    timeout: 30,
  }) as Promise<autocannon.Result> & autocannon.Instance;
  run.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
    if (!measuring || status !== 200) return;
    calls++;
    latencies.push(ms);
  });
  const sampled = new Promise<void>((resolve, reject) => {
    setTimeout(() => {
      snapshot().then((s) => {
        before = s;
        measuring = true;
        fleet.recordSandboxes();
        setTimeout(() => {
          measuring = false;
          snapshot().then((s2) => {
            after = s2;
            resolve();
          }, reject);
        }, seconds * 1000);
      }, reject);
    }, warmUpSeconds * 1000);
  });
  running = run;
  const result = await run;
  running = undefined;
  if (cleaned) throw new Error('interrupted');
  await sampled;
  calls = Math.max(0, calls - wrongInWindow);
  const [b, a] = [before!, after!];
  const measured = (a.at - b.at) / 1000;
  const perCall = (ms: number) => (calls > 0 ? ms / calls : NaN);
  const spent = {
    redis: a.redisMs - b.redisMs,
    gateways: grown(b.gateways, a.gateways, 'ownMs'),
    workers: grown(b.workers, a.workers, 'ownMs'),
    sandboxes: grown(b.workers, a.workers, 'childrenMs'),
    loadGen: a.loadGen.ownMs - b.loadGen.ownMs,
  };
  const machineMs = a.machine.totalMs - b.machine.totalMs || 1;
  latencies.sort((x, y) => x - y);
  const r: StepResult = {
    gateways,
    workers,
    tool,
    seconds: measured,
    calls,
    failed: result.errors + result.timeouts + result.non2xx + result.mismatches,
    p50Ms: percentile(latencies, 50),
    p95Ms: percentile(latencies, 95),
    redisMs: perCall(spent.redis),
    redisIdleMsPerS: NaN, // measured after the config's tools
    redisCommands: [...a.commands]
      .map(([name, { calls: n, usec }]) => {
        const was = b.commands.get(name) ?? { calls: 0, usec: 0 };
        return { name, perCall: (n - was.calls) / calls, usecPerCall: (usec - was.usec) / calls };
      })
      .filter((c) => c.perCall > 0)
      .sort((x, y) => y.usecPerCall - x.usecPerCall),
    gatewayMs: perCall(spent.gateways),
    workerMs: perCall(spent.workers),
    sandboxMs: perCall(spent.sandboxes),
    loadGenMs: perCall(spent.loadGen),
    machineMs: perCall(a.machine.busyMs - b.machine.busyMs),
    machineBusy: (a.machine.busyMs - b.machine.busyMs) / machineMs,
    ownShare: Object.values(spent).reduce((x, y) => x + y, 0) / machineMs,
  };
  progress(
    `${gateways} × ${workers} ${tool}: ${(calls / measured).toFixed(0)} calls/s, p50 ${r.p50Ms.toFixed(1)} ms, ` +
      `Redis ${(r.redisMs * 1000).toFixed(0)} µs/call, ${r.failed} failed` +
      (firstFailure ? ` (the first: ${firstFailure})` : ''),
  );
  return r;
}

/** Redis CPU (ms per second) with this fleet running and no calls: BullMQ's blocking polls, heartbeats, sweeps. */
async function idleRedis(gateways: number, workers: number): Promise<number> {
  progress(`${gateways} × ${workers} idle: ${idleSeconds} s without calls`);
  await new Promise((r) => setTimeout(r, 1000)); // the last calls' records and stats settle
  const [t0, r0] = [performance.now(), await redisCpuMs(redis)];
  await new Promise((r) => setTimeout(r, idleSeconds * 1000));
  const [t1, r1] = [performance.now(), await redisCpuMs(redis)];
  return ((r1 - r0) * 1000) / (t1 - t0);
}

const loadAverage = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const loadBefore = loadAverage();
const results: StepResult[] = [];
let left = 0;
try {
  progress(
    `Redis ${redisUrl}; steps ${configs.map((c) => `${c.gateways}×${c.workers}`).join(', ')}; ` +
      `tools ${tools.join(', ')}; load average ${loadBefore}`,
  );
  for (const { gateways, workers } of configs) {
    await fleet.scaleTo(gateways, workers);
    const steps: StepResult[] = [];
    for (const tool of tools) steps.push(await step(gateways, workers, tool));
    const idle = await idleRedis(gateways, workers);
    for (const r of steps) results.push({ ...r, redisIdleMsPerS: idle });
  }
} finally {
  left = await cleanUp();
}

console.log(
  `toolgate scaling benchmark — ${cores} cores shared by Redis, the gateways, the workers, their ` +
    `bwrap sandboxes and the load generator; load average ${loadBefore} before, ${loadAverage()} after`,
);
console.log(
  `calculator: ${secondsFor.calculator} s at ${connectionsFor.calculator} connections; run_python (bwrap): ` +
    `${secondsFor.run_python} s at ${connectionsFor.run_python} connections, sandboxConcurrency ${sandboxConcurrency} per worker; ` +
    `${warmUpSeconds} s warm-up each, ${idleSeconds} s idle per step; CPU per completed call`,
);
console.log('');
for (const line of table(results)) console.log(line);
console.log('');
for (const tool of tools) console.log(curve(results, tool, cores));
for (const tool of tools) console.log(redisCeiling(results, tool));
console.log('');
for (const tool of tools) console.log(commands(results, tool));
if (cores <= 2) {
  console.log(
    `note: on ${cores} cores every process, the load generator included, competes for the same CPU, ` +
      'so the curve bends as soon as the machine is busy (machine busy near 100 %): more processes ' +
      'only share the same cores. Size by the CPU per call of each tier (docs/scaling.md), not by these ratios.',
  );
}
const failed = results.reduce((sum, r) => sum + r.failed, 0);
console.log(
  `failed calls: ${failed}   sandboxes left after the run (killed): ${left}   target 0 and 0`,
);
process.exit(failed === 0 && left === 0 ? 0 : 1);
