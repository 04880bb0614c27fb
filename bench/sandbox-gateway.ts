// docs/spec.md §9, second and third bullets through the whole product: run_python hello world via
// HTTP → gateway → sandbox queue → worker → warm container, against a plain `docker run --rm`
// of the same image, in one run, with where a warm call's time goes (the worker's sandbox phases
// and the rest: HTTP, queue, lease, workspace check, reply); then 30 s sustained at concurrency
// 8 and raw `docker run --rm` at the same concurrency as long, in alternating halves as
// bench/sandbox/run.ts does, and the containers left.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  benchRedis,
  deploymentContainers,
  freePort,
  redisCommandsPerCall,
  startTs,
  stop,
  topFamilies,
  unmountUnder,
} from './lib.js';
import {
  HELLO,
  TARGETS,
  formatPhases,
  latencyStats,
  loadWindow,
  percentile,
  plainDockerRun,
  sampleLatency,
  summarize,
  type LatencyStats,
  type LoadWindow,
  type PhaseRow,
} from './sandbox/sandbox-bench.js';

const samples = Number(process.env.BENCH_SAMPLES ?? 15);
const seconds = Number(process.env.BENCH_SECONDS ?? 30);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 8);
/** Issue 28's ceiling on Redis commands per run_python call (BullMQ jobs, c=8). */
const COMMANDS_TARGET = 75;

const redisUrl = await benchRedis();
const dir = mkdtempSync(join(tmpdir(), 'toolgate-bench-'));
const key = 'bench-key-0123456789abcdef';
const config = join(dir, 'toolgate.yaml');
writeFileSync(
  config,
  [
    'clients:',
    // One client at concurrency 8 may run 8 at once: with the default sandboxInFlight (4) half
    // its calls would be put back for fairness again and again, which the bench would count as
    // the cost of a run_python call (test/fairness.test.ts holds the cap itself).
    `  - { id: bench, key: ${key}, rateLimit: { perMinute: 100000000 }, limits: { sandboxInFlight: ${concurrency} } }`,
    'log: { level: warn }',
    `worker: { sandboxConcurrency: ${concurrency} }`,
    'sandbox:',
    '  driver: docker',
    `  workspacesRoot: ${join(dir, 'workspaces')}`,
    `  stateDir: ${join(dir, 'state')}`,
    `  pool: { size: 1, sizes: { python: ${concurrency} } }`,
  ].join('\n'),
);
const port = await freePort();
const metricsPort = await freePort();
const env = {
  REDIS_URL: redisUrl,
  TOOLGATE_CONFIG: config,
  PORT: String(port),
  HOST: '127.0.0.1',
  WORKER_METRICS_PORT: String(metricsPort),
  // Not the default 9092: another gateway on the machine would make this one exit at start.
  GATEWAY_METRICS_PORT: String(await freePort()),
  TOOLGATE_REDIS_PREFIX: 'bench-sbx',
  TOOLGATE_LOG_LEVEL: 'info',
};
console.log(
  `toolgate sandbox benchmark — ${samples} samples, ${seconds} s sustained at concurrency ${concurrency}`,
);
const worker = await startTs('services/worker/src/main.ts', env, /worker started/);
const gateway = await startTs('services/gateway/src/main.ts', env, /gateway listening/);

const workerMetrics = async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
/** The worker's warm python containers, read from its own /metrics. */
function warm(text: string): number {
  const m = /toolgate_sandbox_warm_containers\{[^}]*image="python"[^}]*\} (\d+)/.exec(text);
  return m ? Number(m[1]) : 0;
}
/**
 * Waits until the pool is full; returns the last /metrics. Every 100 ms, not run.ts's 20: a
 * scrape costs the worker ~2 ms of CPU, which the refill it waits for would share.
 */
async function poolFull(): Promise<string> {
  let text = await workerMetrics();
  for (let i = 0; i < 600 && warm(text) < concurrency; i++) {
    await new Promise((r) => setTimeout(r, 100));
    text = await workerMetrics();
  }
  return text;
}
/** The worker's toolgate_sandbox_phase_seconds sums (python), ms by phase. */
function phaseSums(text: string): Map<string, number> {
  const sums = new Map<string, number>();
  const re = /toolgate_sandbox_phase_seconds_sum\{([^}]*)\} ([\d.e+-]+)/g;
  for (const m of text.matchAll(re)) {
    const phase = /phase="([^"]+)"/.exec(m[1]!)?.[1];
    if (phase && m[1]!.includes('image="python"')) sums.set(phase, Number(m[2]) * 1000);
  }
  return sums;
}
const PHASES: [string, string][] = [
  ['checkout', 'checkout from the pool'],
  ['mount', 'workspace mount'],
  ['exec', 'exec (call written → exit reported)'],
  ['collect', 'output collection'],
];
/**
 * The warm samples, one call at a time with the pool full before each, split by the worker's
 * own phase histograms (one call per sample, so a sum's growth is that call's phase); the rest
 * of the call is what the driver bench does not have: HTTP in and out, admission and queue,
 * the worker's claim, running lease and workspace check, the end in the queue and the reply.
 * Before each, with the pool as full, a calculator call on the same path (a fresh expression:
 * no cache hit) prices those hops alone at that moment, on a machine whose load drifts.
 */
async function warmBreakdown(): Promise<{
  latency: LatencyStats;
  phases: PhaseRow[];
  calculator: LatencyStats;
}> {
  const totals: number[] = [];
  const cols = new Map(PHASES.map(([k]) => [k, [] as number[]]));
  const outside: number[] = [];
  const calculator: number[] = [];
  for (let i = 0; i < samples; i++) {
    const before = phaseSums(await poolFull());
    let t0 = performance.now();
    await calculatorCall(i);
    calculator.push(performance.now() - t0);
    t0 = performance.now();
    await call();
    totals.push(performance.now() - t0);
    const after = phaseSums(await workerMetrics());
    let inside = 0;
    for (const [k] of PHASES) {
      const ms = (after.get(k) ?? 0) - (before.get(k) ?? 0);
      cols.get(k)!.push(ms);
      inside += ms;
    }
    outside.push(totals.at(-1)! - inside);
  }
  const latency = latencyStats(totals);
  const p50 = percentile(totals, 50);
  const row = (phase: string, v: number[]): PhaseRow => ({
    phase,
    p50Ms: round(percentile(v, 50)),
    share: Math.round((percentile(v, 50) / p50) * 100) / 100,
  });
  return {
    latency,
    phases: [
      row('outside the sandbox: HTTP, queue, lease, workspace, reply', outside),
      ...PHASES.map(([k, label]) => row(label, cols.get(k)!)),
    ],
    calculator: latencyStats(calculator),
  };
}
const round = (n: number) => Math.round(n * 10) / 10;

/** A calculator call through the same gateway, queue and worker (no sandbox). */
async function calculatorCall(i: number): Promise<void> {
  const res = await fetch(`http://127.0.0.1:${port}/tools/calculator/execute`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ expression: `${i}+1` }),
  });
  const body = (await res.json()) as { status: string; cached?: boolean };
  if (body.status !== 'ok') throw new Error(`unexpected ${JSON.stringify(body)}`);
}

const call = async () => {
  const res = await fetch(`http://127.0.0.1:${port}/tools/run_python/execute`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ code: HELLO }),
  });
  const body = (await res.json()) as { status: string; result?: { stdout: string } };
  if (body.status !== 'ok' || body.result?.stdout !== 'hello world\n')
    throw new Error(`unexpected ${JSON.stringify(body)}`);
};

await poolFull();
await call(); // first-use costs (workspace, page cache) out of the sample
await calculatorCall(-1);
const { latency: viaGateway, phases, calculator } = await warmBreakdown();
await plainDockerRun();
const plain = await sampleLatency(plainDockerRun, samples);
// The gateway's load and raw docker run --rm at the same concurrency, in halves ordered
// gateway, raw, raw, gateway as run.ts does: a background load that drifts during the run (a
// shared machine) weighs on both alike. Each half starts with the pool full. Redis commands
// per run_python call, by family, counted around the whole (the raw halves send none; the
// processes' idle traffic is taken out by time).
const windows: Record<'gateway' | 'raw', LoadWindow[]> = { gateway: [], raw: [] };
const commands = await redisCommandsPerCall(redisUrl, async () => {
  for (const which of ['gateway', 'raw', 'raw', 'gateway'] as const) {
    await poolFull();
    windows[which].push(
      await loadWindow(which === 'gateway' ? call : plainDockerRun, seconds / 2, concurrency),
    );
  }
  return windows.gateway.reduce((n, w) => n + w.times.length, 0);
});
const sustained = summarize(windows.gateway, concurrency);
const plainSustained = summarize(windows.raw, concurrency);
await stop(gateway);
await stop(worker); // SIGTERM: the worker removes its warm containers on the way out
unmountUnder(dir); // the workspace image stays mounted after the worker, by design
rmSync(dir, { recursive: true, force: true });
// This deployment's only: containers of other toolgates on a shared engine are not ours to count.
const left = (await deploymentContainers(join(dir, 'state'))).length;

console.log(`  run_python via gateway   p50 ${viaGateway.p50Ms} ms   p95 ${viaGateway.p95Ms} ms`);
console.log(`  docker run --rm          p50 ${plain.p50Ms} ms   p95 ${plain.p95Ms} ms`);
console.log(
  "  where a warm call's time goes (p50 of each part over the samples; shares of the call's p50):",
);
for (const line of formatPhases(phases)) console.log(`  ${line}`);
console.log(
  `  calculator, same path, before each sample: p50 ${calculator.p50Ms} ms (p95 ${calculator.p95Ms}): the hops alone at this load`,
);
console.log(
  `  sustained                ${sustained.callsPerSecond} calls/s at concurrency ${concurrency}, ${sustained.seconds} s (${sustained.calls} calls, ${sustained.errors} errors, p50 ${sustained.p50Ms} ms)`,
);
console.log(
  `  raw docker run --rm      ${plainSustained.callsPerSecond} calls/s at concurrency ${concurrency}, ${plainSustained.seconds} s (${plainSustained.calls} calls, ${plainSustained.errors} errors, p50 ${plainSustained.p50Ms} ms)`,
);
console.log('');
const p50Ratio = viaGateway.p50Ms / plain.p50Ms;
console.log(
  `p50 ratio (gateway run_python / docker run --rm): ${p50Ratio.toFixed(2)}   target ≤ ${TARGETS.p50Ratio}  ${p50Ratio <= TARGETS.p50Ratio ? 'PASS' : 'FAIL'}`,
);
const throughputRatio = sustained.callsPerSecond / plainSustained.callsPerSecond;
console.log(
  `throughput ratio (gateway run_python / docker run --rm, concurrency ${concurrency}): ${throughputRatio.toFixed(2)}   target ≥ ${TARGETS.throughputRatio}  ${throughputRatio >= TARGETS.throughputRatio ? 'PASS' : 'FAIL'}`,
);
console.log(`containers left after the run: ${left}   target 0`);
console.log(
  `Redis commands per run_python call (the sustained halves, idle traffic of ${commands.idlePerCall.toFixed(1)} per call taken out): ${commands.total.toFixed(1)}   target ≤ ${COMMANDS_TARGET}  ${commands.total <= COMMANDS_TARGET ? 'PASS' : 'FAIL'}`,
);
console.log(`  by family: ${topFamilies(commands)}`);
process.exit(left === 0 ? 0 : 1);
