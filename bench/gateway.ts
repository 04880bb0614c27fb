// docs/spec.md §9, first bullet: calculator through HTTP → gateway → BullMQ → worker, against a bare
// BullMQ add + waitUntilFinished on the same Redis, in one run. Prints ratios.
//
// Both sides run side by side and are measured in alternating rounds, so a slow stretch of the
// machine weighs on both alike. HTTP load comes from autocannon, whose per-request cost is a
// third of node:http's: on a 2-core machine the load generator shares the cores with the
// system under test, and only toolgate's side pays for HTTP.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import {
  benchRedis,
  benchRedisPid,
  cpuMs,
  freePort,
  percentile,
  redisCommandsPerCall,
  startTs,
  stop,
  topFamilies,
} from './lib.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 4);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 64);
const sequential = Number(process.env.BENCH_SEQUENTIAL ?? 1500);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const warmUpSeconds = Number(process.env.BENCH_WARMUP_SECONDS ?? 3);
const counted = Number(process.env.BENCH_COUNTED_CALLS ?? 2000);
const EXPRESSION = '2*(3+4)';
/**
 * Issue 28's targets against raw BullMQ add + waitUntilFinished in the same run: toolgate's calls
 * are BullMQ jobs too, with admission, fair priorities and a reply of their own around them.
 */
const TARGET = { throughput: 0.9, p50: 1.3, cpuPerCall: 1.5 } as const;

interface Side {
  label: string;
  /** The processes whose CPU time is charged to this side (the bench process included). */
  pids: Record<string, number | undefined>;
  /** Latencies (ms) of `n` calls made one at a time. */
  sequential(n: number): Promise<number[]>;
  /** Calls completed by `concurrency` callers in `seconds`. */
  load(seconds: number): Promise<number>;
}

const redisUrl = await benchRedis();
console.log(
  `toolgate gateway benchmark — Redis ${redisUrl}; ${rounds} rounds of ${seconds} s at concurrency ${concurrency} and ${Math.round(sequential / rounds)} sequential calls per side`,
);

// Baseline: raw BullMQ, a bare Worker doing the same arithmetic.
const rawWorker = await startTs('bench/raw-worker.ts', { REDIS_URL: redisUrl }, /raw worker ready/);
const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
const queue = new Queue('raw-bench', { connection });
// Every waitUntilFinished adds a listener to the queue while it waits.
queue.setMaxListeners(0);
const events = new QueueEvents('raw-bench', {
  connection: new Redis(redisUrl, { maxRetriesPerRequest: null }),
});
await events.waitUntilReady();
const rawCall = async () => {
  const job = await queue.add('calc', { expression: EXPRESSION }, { removeOnComplete: 1000 });
  const result: unknown = await job.waitUntilFinished(events);
  if (result !== 14) throw new Error(`raw: unexpected ${String(result)}`);
};
const raw: Side = {
  label: 'raw BullMQ add+wait',
  pids: { bench: process.pid, worker: rawWorker.pid, redis: benchRedisPid },
  async sequential(n) {
    const times: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await rawCall();
      times.push(performance.now() - t);
    }
    return times;
  },
  async load(s) {
    let done = 0;
    const until = performance.now() + s * 1000;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < until) {
          await rawCall();
          done++;
        }
      }),
    );
    return done;
  },
};

// toolgate: the real gateway and worker processes.
const key = 'bench-key-0123456789abcdef';
const config = join(mkdtempSync(join(tmpdir(), 'toolgate-bench-')), 'toolgate.yaml');
writeFileSync(
  config,
  `clients:\n  - id: bench\n    key: ${key}\n    rateLimit: { perMinute: 100000000 }\nlog: { level: warn }\n`,
);
const port = await freePort();
const env = {
  REDIS_URL: redisUrl,
  TOOLGATE_CONFIG: config,
  PORT: String(port),
  HOST: '127.0.0.1',
  WORKER_METRICS_PORT: '0',
  TOOLGATE_REDIS_PREFIX: 'bench',
  TOOLGATE_LOG_LEVEL: 'info',
  // The in-process path only: no sandbox driver or warm containers starting beside it (the
  // sandbox path has its own benchmark).
  TOOLGATE_WORKER_QUEUES: 'fast',
};
const worker = await startTs('services/worker/src/main.ts', env, /worker started/);
const gateway = await startTs('services/gateway/src/main.ts', env, /gateway listening/);
const request = {
  url: `http://127.0.0.1:${port}/tools/calculator/execute`,
  method: 'POST' as const,
  headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ expression: EXPRESSION }),
  // Every response is checked: a wrong answer counts as a mismatch and fails the run.
  verifyBody: (body: string) => body.includes('"status":"ok"') && body.includes('"result":14'),
};
async function http(options: Partial<autocannon.Options>, onLatency?: (ms: number) => void) {
  const run = autocannon({ ...request, ...options });
  if (onLatency) {
    run.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) =>
      onLatency(ms),
    );
  }
  const result = await run;
  const failed = result.errors + result.timeouts + result.non2xx + result.mismatches;
  if (failed > 0) {
    throw new Error(
      `toolgate: ${failed} failed calls (errors ${result.errors}, timeouts ${result.timeouts}, non-2xx ${result.non2xx}, wrong answers ${result.mismatches})`,
    );
  }
  return result.requests.total;
}
const viaGateway: Side = {
  label: 'toolgate HTTP→queue→worker',
  pids: { bench: process.pid, gateway: gateway.pid, worker: worker.pid, redis: benchRedisPid },
  async sequential(n) {
    const times: number[] = [];
    await http({ connections: 1, amount: n }, (ms) => times.push(ms));
    return times;
  },
  load: (s) => http({ connections: concurrency, duration: s }),
};

const sides = [raw, viaGateway];
// Steady state, not JIT warm-up: both sides get the same warm-up before anything is timed.
for (const side of sides) await side.load(warmUpSeconds);

const totals = new Map(
  sides.map((side) => [
    side,
    { calls: 0, times: [] as number[], cpu: {} as Record<string, number> },
  ]),
);
for (let round = 1; round <= rounds; round++) {
  const line: string[] = [];
  for (const side of sides) {
    const total = totals.get(side)!;
    const times = await side.sequential(Math.ceil(sequential / rounds));
    total.times.push(...times);
    const before = Object.fromEntries(Object.entries(side.pids).map(([k, p]) => [k, cpuMs(p)]));
    const calls = await side.load(seconds);
    for (const [name, pid] of Object.entries(side.pids)) {
      const [a, b] = [before[name], cpuMs(pid)];
      if (a !== undefined && b !== undefined) total.cpu[name] = (total.cpu[name] ?? 0) + b - a;
    }
    total.calls += calls;
    times.sort((a, b) => a - b);
    line.push(
      `${side.label}: ${(calls / seconds).toFixed(0)} calls/s, p50 ${percentile(times, 50).toFixed(2)} ms`,
    );
  }
  console.log(`  round ${round}/${rounds}  ${line.join('  |  ')}`);
}

// Redis commands per calculator call, by family: the gateway's and worker's work per call is
// what bounds a deployment (one Redis master each). Counted apart from the timed rounds, at the
// load's concurrency and one call at a time, with both sides idle but for these calls.
const commands = await redisCommandsPerCall(redisUrl, () =>
  http({ connections: concurrency, amount: counted }),
);
const oneAtATime = await redisCommandsPerCall(redisUrl, () =>
  http({ connections: 1, amount: Math.min(counted, 500) }),
);
// The same count for raw BullMQ add+wait: the reference for any call through BullMQ.
const rawCommands = await redisCommandsPerCall(redisUrl, async () => {
  let left = counted;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await rawCall();
    }),
  );
  return counted;
});

await stop(gateway);
await stop(worker);
await stop(rawWorker);
await events.close();
await queue.close();

console.log('');
const summary = new Map<
  Side,
  { throughput: number; p50: number; p99: number; cpuPerCallUs: number | undefined }
>();
for (const side of sides) {
  const { calls, times, cpu } = totals.get(side)!;
  times.sort((a, b) => a - b);
  const perCall = Object.entries(cpu).map(([k, ms]) => `${k} ${((ms * 1000) / calls).toFixed(0)}`);
  const cpuTotal = Object.values(cpu).reduce((a, b) => a + b, 0);
  const s = {
    throughput: calls / (seconds * rounds),
    p50: percentile(times, 50),
    p99: percentile(times, 99),
    cpuPerCallUs: perCall.length > 0 ? (cpuTotal * 1000) / calls : undefined,
  };
  summary.set(side, s);
  console.log(
    `  ${side.label.padEnd(28)} p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  ${s.throughput.toFixed(0)} calls/s @${concurrency}`,
  );
  if (perCall.length > 0) {
    console.log(
      `  ${''.padEnd(28)} CPU per call (µs): ${perCall.join(', ')}; total ${((cpuTotal * 1000) / calls).toFixed(0)}`,
    );
  }
}
const [r, t] = [summary.get(raw)!, summary.get(viaGateway)!];
const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
const throughputRatio = t.throughput / r.throughput;
const p50Ratio = t.p50 / r.p50;
const redisCpu = (side: Side) => {
  const { calls, cpu } = totals.get(side)!;
  return ((cpu.redis ?? NaN) * 1000) / calls;
};
console.log('');
console.log(
  `throughput ratio (toolgate / raw): ${throughputRatio.toFixed(2)}   target ≥ ${TARGET.throughput}  ${verdict(throughputRatio >= TARGET.throughput)}`,
);
console.log(
  `p50 ratio        (toolgate / raw): ${p50Ratio.toFixed(2)}   target ≤ ${TARGET.p50}  ${verdict(p50Ratio <= TARGET.p50)}`,
);
console.log(`p99 ratio        (toolgate / raw): ${(t.p99 / r.p99).toFixed(2)}`);
if (t.cpuPerCallUs !== undefined && r.cpuPerCallUs !== undefined) {
  const ratio = t.cpuPerCallUs / r.cpuPerCallUs;
  console.log(
    `CPU per call     (all processes, toolgate / raw): ${t.cpuPerCallUs.toFixed(0)} / ${r.cpuPerCallUs.toFixed(0)} µs = ${ratio.toFixed(2)}   target ≤ ${TARGET.cpuPerCall}  ${verdict(ratio <= TARGET.cpuPerCall)}`,
  );
}
const [tRedis, rRedis] = [redisCpu(viaGateway), redisCpu(raw)];
console.log(
  `Redis CPU per call (toolgate / raw): ${tRedis.toFixed(1)} / ${rRedis.toFixed(1)} µs = ${(tRedis / rRedis).toFixed(2)}   target ≤ 1  ${verdict(tRedis <= rRedis)}`,
);
console.log('');
console.log(
  `Redis commands per calculator call at concurrency ${concurrency} (${counted} calls, idle traffic of ${commands.idlePerCall.toFixed(1)} per call taken out): ${commands.total.toFixed(1)}   target ≤ raw's ${rawCommands.total.toFixed(1)}  ${verdict(commands.total <= rawCommands.total)}`,
);
console.log(`  by family: ${topFamilies(commands, 12)}`);
console.log(
  `  raw BullMQ add+wait, counted the same way: ${rawCommands.total.toFixed(1)} per job (${topFamilies(rawCommands, 8)})`,
);
console.log(
  `Redis commands per calculator call one at a time: ${oneAtATime.total.toFixed(1)}   target ≤ 75  ${verdict(oneAtATime.total <= 75)}`,
);
console.log(`  by family: ${topFamilies(oneAtATime, 12)}`);
console.log(
  `Redis commands per run_python call: counted by pnpm bench:sandbox   target ≤ 75 at c=8`,
);
process.exit(0);
