// Issue 12, long-running calls: how fast a cancelled sandboxed call is gone, and how live its
// output is, through real processes — one worker and two gateway replicas on one Redis — for
// each sandbox driver. Calls are started on gateway 1 (`?wait=false`); cancels and event
// streams go through gateway 2, so everything crosses Redis as it would between replicas.
//
// Per driver, BENCH_RUNS times each:
// 1. cancel-to-gone: `run_shell "sleep 60.<random>"`, once its process shows on the host,
//    POST /v1/calls/{id}/cancel; time to (a) the answer, (b) no host process with the marker
//    in its command line, (c) on docker, no container of the worker's deployment (the worker
//    keeps no warm pool here, so every container is a call's).
// 2. live output: a call printing `date +%s%N` every 200 ms for 3 s, followed over SSE; each
//    line's latency is its arrival here minus the time it carries (the sandbox shares the host
//    clock). Also accept (202) → first output event, and how long before the call's end the
//    first output came.
//
// Targets: cancel-to-gone p95 ≤ 2000 ms (the issue's budget), no process or container left,
// every cancelled call ends `cancelled` (the answer itself may be 202: the worker had not
// confirmed yet), live-output p95 ≤ 10 × calls.events.flushMs. Exits 1 when one is missed, 2 when the bench
// itself broke.
//
// Env (defaults): BENCH_RUNS (10); BENCH_SANDBOX_DRIVER (both: docker, bwrap; a driver that
// cannot run here is skipped with the reason); BENCH_FLUSH_MS (100) calls.events.flushMs.
import { randomInt } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChildProcess } from 'node:child_process';
import { whyDriverUnavailable } from '@toolgate/sandbox/testing';
import {
  benchRedis,
  benchRedisPid,
  deploymentContainers,
  freePort,
  percentile,
  processesWith,
  removeContainers,
  startTs,
  stop,
  unmountUnder,
} from './lib.js';
import { nowMs, readEvents } from './long-calls/sse.js';

type DriverName = 'docker' | 'bwrap';

const env = process.env;
const runs = Number(env.BENCH_RUNS ?? 10);
const flushMs = Number(env.BENCH_FLUSH_MS ?? 100);
const DRIVERS: DriverName[] =
  env.BENCH_SANDBOX_DRIVER === undefined
    ? ['docker', 'bwrap']
    : [env.BENCH_SANDBOX_DRIVER as DriverName];
for (const d of DRIVERS) {
  if (d !== 'docker' && d !== 'bwrap') {
    console.error(`BENCH_SANDBOX_DRIVER: "${String(d)}" is not a sandbox driver (docker | bwrap)`);
    process.exit(2);
  }
}
/** Issue 12: a cancelled call's processes and sandbox are gone within this. */
const GONE_BUDGET_MS = 2000;
const LIVE_P95_BOUND_MS = 10 * flushMs;
/** How long a cancelled call may take to disappear before it counts as left behind. */
const LEFT_AFTER_MS = 10_000;
/** How often the host is scanned while waiting (a /proc scan costs a few ms of CPU). */
const POLL_MS = 10;
const LINES = 15;
const LIVE_COMMAND = `for i in $(seq ${LINES}); do date +%s%N; sleep 0.2; done`;
const KEY = 'bench-long-calls-key-0123456789abcdef';

// --- setup -------------------------------------------------------------------------------
const redisUrl = await benchRedis();
const root = mkdtempSync(join(tmpdir(), 'toolgate-bench-long-calls-'));
// mkdtemp makes it 0700: the bwrap sandbox, under its own uid, must get through to the workspaces.
chmodSync(root, 0o711);

/** What one driver's run started: stopped by pid at its end (or on Ctrl-C). */
interface Stack {
  driver: DriverName;
  dir: string;
  stateDir: string;
  worker?: ChildProcess;
  gateways: ChildProcess[];
  /** Gateway 1 takes the calls, gateway 2 cancels and streams them. */
  urls: [string, string];
}
let current: Stack | undefined;

async function startStack(driver: DriverName): Promise<Stack> {
  const dir = join(root, driver);
  mkdirSync(dir, { mode: 0o711 });
  const stateDir = join(dir, 'state');
  const configPath = join(dir, 'toolgate.yaml');
  writeFileSync(
    configPath,
    [
      'clients:',
      `  - { id: bench, key: ${KEY}, tools: [run_shell], rateLimit: { perMinute: 100000 } }`,
      'log: { level: warn }',
      `calls: { events: { flushMs: ${flushMs} } }`,
      'worker: { queues: [fast, sandbox], sandboxConcurrency: 4 }',
      'sandbox:',
      `  driver: ${driver}`,
      `  workspacesRoot: ${join(dir, 'workspaces')}`,
      `  stateDir: ${stateDir}`,
      // No loop-mounted workspace images to undo afterwards.
      '  workspaceQuota: off',
      // No warm containers: every container of this deployment is a call's, so one still
      // there after a cancel is a leak, and the count needs no bookkeeping of the pool.
      '  pool: { size: 0 }',
      '',
    ].join('\n'),
  );
  const serviceEnv = (port: number) => ({
    REDIS_URL: redisUrl,
    TOOLGATE_CONFIG: configPath,
    TOOLGATE_REDIS_PREFIX: `bench-long-${driver}`,
    PORT: String(port),
    HOST: '127.0.0.1',
    // `info`: the ready lines ("worker started", "gateway listening") are info lines.
    TOOLGATE_LOG_LEVEL: 'info',
  });
  const ports = [await freePort(), await freePort()] as const;
  const stack: Stack = {
    driver,
    dir,
    stateDir,
    gateways: [],
    urls: [`http://127.0.0.1:${ports[0]}`, `http://127.0.0.1:${ports[1]}`],
  };
  current = stack;
  stack.worker = await startTs(
    'services/worker/src/main.ts',
    { ...serviceEnv(0), WORKER_METRICS_PORT: String(await freePort()) },
    /worker started/,
  );
  for (const port of ports) {
    stack.gateways.push(
      await startTs('services/gateway/src/main.ts', serviceEnv(port), /gateway listening/),
    );
  }
  return stack;
}

/**
 * Stops the stack's processes by pid (the worker last: SIGTERM makes it remove its
 * containers), removes any container of its deployment still there, unmounts and removes its
 * directory. Returns how many containers were left.
 */
async function stopStack(stack: Stack): Promise<number> {
  for (const child of stack.gateways) await stop(child);
  if (stack.worker) await stop(stack.worker);
  let left: string[] = [];
  if (stack.driver === 'docker') {
    left = await deploymentContainers(stack.stateDir).catch(() => []);
    await removeContainers(left).catch(() => undefined);
  }
  unmountUnder(stack.dir);
  rmSync(stack.dir, { recursive: true, force: true });
  if (current === stack) current = undefined;
  return left.length;
}

async function shutdown(): Promise<void> {
  if (current) await stopStack(current);
  if (benchRedisPid !== undefined) process.kill(benchRedisPid, 'SIGTERM');
  unmountUnder(root);
  rmSync(root, { recursive: true, force: true });
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`${signal}: stopping the processes this run started…`);
    void shutdown().finally(() => process.exit(130));
  });
}

// --- calls -------------------------------------------------------------------------------
const auth = { authorization: `Bearer ${KEY}` };

/** Starts run_shell with ?wait=false on `base`; the call id and when the 202 arrived. */
async function startCall(base: string, command: string): Promise<{ id: string; at: number }> {
  const res = await fetch(`${base}/tools/run_shell/execute?wait=false`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ command }),
  });
  const at = nowMs();
  const body = await res.text();
  if (res.status !== 202) throw new Error(`run_shell ?wait=false answered ${res.status}: ${body}`);
  return { id: (JSON.parse(body) as { id: string }).id, at };
}

/** ms from `since` until `done()` holds, polling every POLL_MS; undefined past `withinMs`. */
async function timeUntil(
  since: number,
  done: () => boolean | Promise<boolean>,
  withinMs: number,
): Promise<number | undefined> {
  for (;;) {
    if (await done()) return performance.now() - since;
    if (performance.now() - since > withinMs) return undefined;
    await sleep(POLL_MS);
  }
}

interface CancelRun {
  answerMs: number;
  answerStatus: string;
  /** undefined: still there LEFT_AFTER_MS after the cancel. */
  processMs: number | undefined;
  containerMs: number | undefined;
  /** The call's status once it settled, read back through gateway 1. */
  finalStatus: string;
}

/** The call's status through GET /v1/calls/{id}, once it is no longer `running` (≤ 5 s). */
async function settledStatus(base: string, id: string): Promise<string> {
  let status = '?';
  await timeUntil(
    performance.now(),
    async () => {
      const res = await fetch(`${base}/v1/calls/${id}`, { headers: auth });
      status = ((await res.json()) as { status?: string }).status ?? `HTTP ${res.status}`;
      return status !== 'running';
    },
    5000,
  );
  return status;
}

async function cancelOnce(stack: Stack): Promise<CancelRun> {
  const marker = `sleep 60.${randomInt(1e9)}`;
  const { id } = await startCall(stack.urls[0], marker);
  const visible = await timeUntil(performance.now(), () => processesWith(marker) > 0, 30_000);
  if (visible === undefined) throw new Error(`${marker} never showed on the host`);

  const asked = performance.now();
  const answer = fetch(`${stack.urls[1]}/v1/calls/${id}/cancel`, {
    method: 'POST',
    headers: auth,
  }).then(async (res) => {
    const answerMs = performance.now() - asked;
    const body = (await res.json()) as { status?: string };
    return { answerMs, answerStatus: `${res.status} ${body.status ?? '?'}` };
  });
  const [answered, processMs, containerMs] = await Promise.all([
    answer,
    timeUntil(asked, () => processesWith(marker) === 0, LEFT_AFTER_MS),
    stack.driver === 'docker'
      ? timeUntil(
          asked,
          async () => (await deploymentContainers(stack.stateDir)).length === 0,
          LEFT_AFTER_MS,
        )
      : Promise.resolve(0),
  ]);
  return {
    ...answered,
    processMs,
    containerMs,
    finalStatus: await settledStatus(stack.urls[0], id),
  };
}

interface LiveRun {
  /** Arrival here − the timestamp in the line, per line. */
  latencies: number[];
  lines: number;
  acceptToFirstMs: number;
  /** How long before the outcome arrived the first output did. */
  firstBeforeEndMs: number;
  durationMs: number;
  outcome: string;
}

async function liveOnce(stack: Stack): Promise<LiveRun> {
  const { id, at: accepted } = await startCall(stack.urls[0], LIVE_COMMAND);
  const res = await fetch(`${stack.urls[1]}/v1/calls/${id}/events`, { headers: auth });
  if (res.status !== 200) throw new Error(`events answered ${res.status}: ${await res.text()}`);
  const events = await readEvents(res);
  const outputs = events.filter((e) => e.event === 'output' && e.data.stream === 'stdout');
  const latencies: number[] = [];
  for (const e of outputs) {
    for (const line of String(e.data.text).split('\n')) {
      if (!/^\d{19}$/.test(line)) continue;
      // BigInt: nanoseconds since the epoch are past 2^53.
      latencies.push(e.at - Number(BigInt(line) / 1000n) / 1000);
    }
  }
  const outcome = events.at(-1);
  const first = outputs[0];
  return {
    latencies,
    lines: latencies.length,
    acceptToFirstMs: first ? first.at - accepted : NaN,
    firstBeforeEndMs: first && outcome ? outcome.at - first.at : NaN,
    durationMs: Number(outcome?.data.durationMs ?? NaN),
    outcome: outcome?.event === 'outcome' ? String(outcome.data.status) : 'no outcome event',
  };
}

// --- the runs ----------------------------------------------------------------------------
interface DriverResult {
  driver: DriverName;
  cancels: CancelRun[];
  lives: LiveRun[];
  leftAtStop: number;
}

const results: DriverResult[] = [];
const skipped: string[] = [];
console.log(
  `toolgate long-running calls benchmark — Redis ${redisUrl}; worker + 2 gateways; ${runs} runs per measure; ` +
    `calls.events.flushMs ${flushMs}; sandbox.pool.size 0`,
);
const t0 = performance.now();
try {
  for (const driver of DRIVERS) {
    const why = await whyDriverUnavailable(driver);
    if (why) {
      skipped.push(`${driver}: skipped, ${why}`);
      console.log(`${driver}: skipped, ${why}`);
      continue;
    }
    const stack = await startStack(driver);
    // First-use costs (the client's workspace, page cache, JIT) out of the sample.
    await liveOnce(stack);
    const cancels: CancelRun[] = [];
    for (let i = 0; i < runs; i++) cancels.push(await cancelOnce(stack));
    const lives: LiveRun[] = [];
    for (let i = 0; i < runs; i++) lives.push(await liveOnce(stack));
    const leftAtStop = await stopStack(stack);
    results.push({ driver, cancels, lives, leftAtStop });
    console.log(`  ${driver} done (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  }
} catch (err) {
  console.error('the benchmark failed:', err);
  await shutdown();
  process.exit(2);
}
await shutdown();

// --- report ------------------------------------------------------------------------------
const sorted = (xs: number[]) => [...xs].sort((x, y) => x - y);
const p = (xs: number[], q: number) => percentile(sorted(xs), q);
const fmt = (ms: number) => (Number.isFinite(ms) ? ms.toFixed(0) : '—');
const spread = (xs: number[]) =>
  `p50 ${fmt(p(xs, 50))} ms  p95 ${fmt(p(xs, 95))} ms  max ${fmt(Math.max(...xs))} ms`;
const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
const defined = (xs: (number | undefined)[]) => xs.filter((x): x is number => x !== undefined);
const tally = (xs: string[]) => {
  const counts = new Map<string, number>();
  for (const x of xs) counts.set(x, (counts.get(x) ?? 0) + 1);
  return [...counts].map(([k, n]) => `${k} ×${n}`).join(', ');
};

interface Row {
  driver: string;
  answer: string;
  gone: string;
  ratio: string;
  live: string;
  liveRatio: string;
  first: string;
  beforeEnd: string;
  pass: boolean;
}
const rows: Row[] = [];
for (const r of results) {
  const answers = r.cancels.map((c) => c.answerMs);
  const processes = defined(r.cancels.map((c) => c.processMs));
  const containers = defined(r.cancels.map((c) => c.containerMs));
  const left = r.cancels.filter((c) => c.processMs === undefined || c.containerMs === undefined);
  // Gone = the later of no process and no container (a run that left something counts with
  // the time it was given, so the percentile cannot look better for it).
  const gone = r.cancels.map((c) =>
    Math.max(c.processMs ?? LEFT_AFTER_MS, c.containerMs ?? LEFT_AFTER_MS),
  );
  const goneRatio = p(gone, 95) / GONE_BUDGET_MS;
  // The answer may be 202 (the worker had not confirmed yet); what the call ends as may not.
  const cancelledAll = r.cancels.every((c) => c.finalStatus === 'cancelled');
  const goneOk = goneRatio <= 1 && left.length === 0 && r.leftAtStop === 0 && cancelledAll;

  const latencies = r.lives.flatMap((l) => l.latencies);
  const livePass = r.lives.every((l) => l.outcome === 'ok' && l.lines === LINES);
  const liveOk = livePass && p(latencies, 95) <= LIVE_P95_BOUND_MS;
  const accepts = r.lives.map((l) => l.acceptToFirstMs);
  const beforeEnd = r.lives.map((l) => l.firstBeforeEndMs);
  const durations = r.lives.map((l) => l.durationMs);

  console.log('');
  console.log(
    `${r.driver} driver — ${runs} cancels of a running "sleep 60.<n>", ${runs} live calls`,
  );
  console.log(
    `  cancel → answer        ${spread(answers)}   (${tally(r.cancels.map((c) => c.answerStatus))}; ended ${tally(r.cancels.map((c) => c.finalStatus))})`,
  );
  console.log(`  cancel → no process    ${spread(processes)}`);
  if (r.driver === 'docker') console.log(`  cancel → no container  ${spread(containers)}`);
  console.log(
    `  cancel → gone          ${spread(gone)}   p95 / ${GONE_BUDGET_MS} ms = ${goneRatio.toFixed(2)}, target ≤ 1; ` +
      `left: ${left.length} calls, ${r.leftAtStop} containers at stop, target 0; ` +
      `ended cancelled ${r.cancels.filter((c) => c.finalStatus === 'cancelled').length}/${r.cancels.length}  ${verdict(goneOk)}`,
  );
  console.log(
    `  live output latency    ${spread(latencies)}   (${latencies.length}/${runs * LINES} lines)   ` +
      `p50 / flushMs = ${(p(latencies, 50) / flushMs).toFixed(2)}; p95 target ≤ ${LIVE_P95_BOUND_MS} ms  ${verdict(liveOk)}`,
  );
  if (!livePass) {
    console.log(
      `    outcomes: ${tally(r.lives.map((l) => `${l.outcome}/${l.lines} lines`))} (expected ok/${LINES} lines)`,
    );
  }
  console.log(`  accept → first output  ${spread(accepts)}`);
  console.log(
    `  first output before the end  ${spread(beforeEnd)}   (calls lasted p50 ${fmt(p(durations, 50))} ms)`,
  );
  rows.push({
    driver: r.driver,
    answer: `${fmt(p(answers, 50))} / ${fmt(p(answers, 95))}`,
    gone: `${fmt(p(gone, 50))} / ${fmt(p(gone, 95))} / ${fmt(Math.max(...gone))}`,
    ratio: goneRatio.toFixed(2),
    live: `${fmt(p(latencies, 50))} / ${fmt(p(latencies, 95))}`,
    liveRatio: (p(latencies, 50) / flushMs).toFixed(2),
    first: `${fmt(p(accepts, 50))} / ${fmt(p(accepts, 95))}`,
    beforeEnd: fmt(p(beforeEnd, 50)),
    pass: goneOk && liveOk,
  });
}

console.log('');
const header = [
  'driver'.padEnd(7),
  'answer p50/p95'.padStart(15),
  'gone p50/p95/max'.padStart(17),
  'p95/2s'.padStart(7),
  'live p50/p95'.padStart(13),
  'p50/flush'.padStart(10),
  'accept→1st p50/p95'.padStart(19),
  '1st before end'.padStart(15),
  ' verdict',
];
console.log(header.join(' '));
for (const r of rows) {
  console.log(
    [
      r.driver.padEnd(7),
      r.answer.padStart(15),
      r.gone.padStart(17),
      r.ratio.padStart(7),
      r.live.padStart(13),
      r.liveRatio.padStart(10),
      r.first.padStart(19),
      r.beforeEnd.padStart(15),
      ` ${verdict(r.pass)}`,
    ].join(' '),
  );
}
for (const s of skipped) console.log(s);
console.log(
  `targets: every cancelled call ends "cancelled", gone p95 ≤ ${GONE_BUDGET_MS} ms, no process or container left, ` +
    `live-output p95 ≤ ${LIVE_P95_BOUND_MS} ms (10 × flushMs); wall time ${((performance.now() - t0) / 1000).toFixed(0)} s`,
);
if (results.length === 0) {
  console.log('no driver could run: nothing measured');
  process.exit(2);
}
process.exit(rows.every((r) => r.pass) ? 0 : 1);
