// docs/spec.md §9, second and third bullets through the whole product: run_python hello world via
// HTTP → gateway → sandbox queue → worker → warm container, against a plain `docker run --rm`
// of the same image, in one run; then 30 s sustained at concurrency 8, raw `docker run --rm` at
// the same concurrency as long, and the containers left.
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
import { HELLO, TARGETS, plainDockerRun, sampleLatency, sustain } from './sandbox/sandbox-bench.js';

const samples = Number(process.env.BENCH_SAMPLES ?? 15);
const seconds = Number(process.env.BENCH_SECONDS ?? 30);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 8);
/** Issue 20's ceiling on Redis commands per run_python call. */
const COMMANDS_TARGET = 45;

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

/** The worker's warm python containers, read from its own /metrics. */
async function warm(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const m = /toolgate_sandbox_warm_containers\{[^}]*image="python"[^}]*\} (\d+)/.exec(text);
  return m ? Number(m[1]) : 0;
}
async function poolFull(): Promise<void> {
  for (let i = 0; i < 600 && (await warm()) < concurrency; i++)
    await new Promise((r) => setTimeout(r, 100));
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
const viaGateway = await sampleLatency(call, samples, poolFull);
await plainDockerRun();
const plain = await sampleLatency(plainDockerRun, samples);
await poolFull();
// Redis commands per run_python call, by family, counted around the sustained run.
let sustained: Awaited<ReturnType<typeof sustain>> | undefined;
const commands = await redisCommandsPerCall(redisUrl, async () => {
  sustained = await sustain(call, seconds, concurrency);
  return sustained.calls;
});
// Raw docker run --rm at the same concurrency and length, right after, pool refilled first.
await poolFull();
const plainSustained = await sustain(plainDockerRun, seconds, concurrency);
await stop(gateway);
await stop(worker); // SIGTERM: the worker removes its warm containers on the way out
unmountUnder(dir); // the workspace image stays mounted after the worker, by design
rmSync(dir, { recursive: true, force: true });
// This deployment's only: containers of other toolgates on a shared engine are not ours to count.
const left = (await deploymentContainers(join(dir, 'state'))).length;

console.log(`  run_python via gateway   p50 ${viaGateway.p50Ms} ms   p95 ${viaGateway.p95Ms} ms`);
console.log(`  docker run --rm          p50 ${plain.p50Ms} ms   p95 ${plain.p95Ms} ms`);
if (!sustained) throw new Error('the sustained run did not finish');
console.log(
  `  sustained                ${sustained.callsPerSecond} calls/s at concurrency ${concurrency} (${sustained.calls} calls, ${sustained.errors} errors, p50 ${sustained.p50Ms} ms)`,
);
console.log(
  `  raw docker run --rm      ${plainSustained.callsPerSecond} calls/s at concurrency ${concurrency} (${plainSustained.calls} calls, ${plainSustained.errors} errors, p50 ${plainSustained.p50Ms} ms)`,
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
  `Redis commands per run_python call (the sustained run, idle traffic of ${commands.idlePerCall.toFixed(1)} per call taken out): ${commands.total.toFixed(1)}   target ≤ ${COMMANDS_TARGET}  ${commands.total <= COMMANDS_TARGET ? 'PASS' : 'FAIL'}`,
);
console.log(`  by family: ${topFamilies(commands)}`);
process.exit(left === 0 ? 0 : 1);
