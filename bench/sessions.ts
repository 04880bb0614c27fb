// Issue 23 §3 (docs/sessions.md, "Measured"): the second and later calls in a session against a
// fresh run_python, both through the whole product (HTTP → gateway → queue → worker → docker),
// in one run: `print("hello world")` in each, the fresh ones from the warm pool (its best case),
// the session's in its one long-lived container. And the case sessions exist for: a data frame
// built once and read again, against rebuilding it in every fresh call.
//
// Results on stdout, progress on stderr. Env: BENCH_SAMPLES (per measurement, default 20).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchRedis, deploymentContainers, freePort, startTs, stop, unmountUnder } from './lib.js';
import { HELLO, sampleLatency, type LatencyStats } from './sandbox/sandbox-bench.js';

const samples = Number(process.env.BENCH_SAMPLES ?? 20);
/** Issue 23's target: a session's second call at most this share of a fresh run_python's p50. */
const TARGET_RATIO = 0.3;
const FRAME =
  'import pandas as pd, numpy as np\ndf = pd.DataFrame(np.arange(200_000).reshape(-1, 4), columns=list("abcd"))';
const READ = 'print(int(df["a"].sum()))';

const progress = (line: string) => process.stderr.write(`${line}\n`);
const redisUrl = await benchRedis();
const dir = mkdtempSync(join(tmpdir(), 'toolgate-bench-sessions-'));
const key = 'bench-key-0123456789abcdef';
const config = join(dir, 'toolgate.yaml');
writeFileSync(
  config,
  [
    'clients:',
    `  - { id: bench, key: ${key}, rateLimit: { perMinute: 100000000 } }`,
    'log: { level: warn }',
    'sandbox:',
    '  driver: docker',
    `  workspacesRoot: ${join(dir, 'workspaces')}`,
    `  stateDir: ${join(dir, 'state')}`,
    '  pool: { size: 1, sizes: { python: 2 } }',
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
  TOOLGATE_REDIS_PREFIX: 'bench-sessions',
  TOOLGATE_LOG_LEVEL: 'info',
};
console.log(`toolgate sessions benchmark — ${samples} samples per measurement, docker`);
const worker = await startTs('services/worker/src/main.ts', env, /worker started/);
const gateway = await startTs('services/gateway/src/main.ts', env, /gateway listening/);
const base = `http://127.0.0.1:${port}`;
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

async function warm(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const m = /toolgate_sandbox_warm_containers\{[^}]*image="python"[^}]*\} (\d+)/.exec(text);
  return m ? Number(m[1]) : 0;
}
/** Fresh calls start from a full warm pool: their best case. */
async function poolFull(): Promise<void> {
  for (let i = 0; i < 600 && (await warm()) < 2; i++) await new Promise((r) => setTimeout(r, 100));
}

async function run(code: string, session?: string): Promise<string> {
  const res = await fetch(`${base}/tools/run_python/execute`, {
    method: 'POST',
    headers: { ...headers, ...(session ? { 'x-toolgate-session': session } : {}) },
    body: JSON.stringify({ code }),
  });
  const body = (await res.json()) as { status: string; result?: { stdout: string } };
  if (body.status !== 'ok') throw new Error(`unexpected ${JSON.stringify(body)}`);
  return body.result?.stdout ?? '';
}

async function openSession(): Promise<string> {
  const res = await fetch(`${base}/v1/sessions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ tool: 'run_python' }),
  });
  if (res.status !== 201) throw new Error(`POST /v1/sessions: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { id: string }).id;
}

const line = (label: string, s: LatencyStats) =>
  console.log(`  ${label.padEnd(44)} p50 ${s.p50Ms} ms   p95 ${s.p95Ms} ms`);

await poolFull();
await run(HELLO); // first-use costs (workspace, page cache) out of the sample
progress('fresh run_python…');
const fresh = await sampleLatency(() => run(HELLO), samples, poolFull);
progress('session…');
const session = await openSession();
const t0 = performance.now();
await run(HELLO, session);
const firstMs = Math.round(performance.now() - t0);
const later = await sampleLatency(() => run(HELLO, session), samples);
progress('data frame…');
const freshFrame = await sampleLatency(() => run(`${FRAME}\n${READ}`), samples, poolFull);
const frameSession = await openSession();
await run(FRAME, frameSession);
const sessionFrame = await sampleLatency(() => run(READ, frameSession), samples);
for (const id of [session, frameSession])
  await fetch(`${base}/v1/sessions/${id}`, { method: 'DELETE', headers });

await stop(gateway);
await stop(worker);
unmountUnder(dir);
rmSync(dir, { recursive: true, force: true });
const left = (await deploymentContainers(join(dir, 'state'))).length;

line('fresh run_python (warm pool)', fresh);
console.log(`  ${'session: first call (starts its container)'.padEnd(44)} ${firstMs} ms`);
line('session: second and later calls', later);
line('fresh: build a 50k-row data frame, read it', freshFrame);
line('session: read the frame built earlier', sessionFrame);
console.log('');
const ratio = later.p50Ms / fresh.p50Ms;
console.log(
  `p50 ratio (session call / fresh run_python): ${ratio.toFixed(2)}   target ≤ ${TARGET_RATIO}  ${ratio <= TARGET_RATIO ? 'PASS' : 'FAIL'}`,
);
console.log(
  `p50 ratio, data frame (session read / fresh build+read): ${(sessionFrame.p50Ms / freshFrame.p50Ms).toFixed(3)}`,
);
console.log(`containers left after the run: ${left}   target 0`);
process.exit(left === 0 && ratio <= TARGET_RATIO ? 0 : 1);
