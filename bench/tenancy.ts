// Issue 10, noisy neighbours: what one client's abuse costs another, through real gateway and
// worker processes, Redis and the sandbox driver, in one run, as ratios. Client B measures
// calculator p50/p99 and run_python p50 alone (first and last, pooled as the reference), and
// while client A (its own process, several connections) (a) floods the sandbox queue with 5 s
// calls, (b) sends shell-policy bombs, (c) floods refusals with 1 MB bodies, (d) lists its
// calls over an index of results at calls.maxResultBytes (BENCH_LISTING_RESULTS, 1000), (e) tries
// to hold connections open (bench/tenancy/held-client.ts). Throughout, a
// poller times the gateway's /healthz every 20 ms; Redis `used_memory` is read before and
// after each phase.
//
// Targets per phase: B calculator p99 ≤ 2× alone, B run_python p50 ≤ 3× alone (both with no
// failed or timed-out call), /healthz p99 < 50 ms, Redis growth < BENCH_REDIS_BOUND_MB.
// Exits 1 when a target is missed or a sandbox container is left behind.
//
// Env (defaults): BENCH_PHASE_SECONDS (8) measured seconds per phase, half calculator, half
// run_python; BENCH_RAMP_MS (1500) A's head start; BENCH_A_CONNECTIONS (4); BENCH_TIMEOUT_MS
// (15000) per-request deadline, a timeout is a failure; BENCH_BOMB_PAIRS (22) and
// BENCH_BOMB_DOUBLINGS (25) size the bombs (today's policy check takes ~0.7 s on 22 pairs and
// doubles per pair); BENCH_BODY_BYTES (1000000); BENCH_BODY_SHAPE (wide: ~35k short fields |
// long: one string); BENCH_REDIS_BOUND_MB (20); BENCH_SANDBOX_DRIVER (docker | bwrap);
// BENCH_PHASES (all: flood,bombs,refusals,listings,held,default-share); BENCH_LIMITS (auto | on | off): A's
// `clients[].limits` (queued 16, sandboxInFlight 2) — `auto` keeps them when this build's
// config accepts them and runs without them when it refuses them.
// (f) default-share, last: an A with the default limits queues 16 long calls (sleep
// BENCH_SHARE_CALL_SECONDS, 12); B's run_python p50 beside them ≤ 3× B alone.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseSandboxConfig } from '@toolgate/sandbox';
import { Redis } from 'ioredis';
// The queue names and prefix as the gateway builds them (one place for key names).
import { Keys } from '../packages/calls/src/keys.js';
import { CallQueue } from '../packages/calls/src/call-queue.js';
// The listings phase fills a client's index as the worker does.
import { CallIndex } from '../packages/calls/src/call-index.js';
import { CallStore, finishedRecord } from '../packages/calls/src/store.js';
import {
  benchRedis,
  benchRedisPid,
  deploymentContainers,
  freePort,
  percentile,
  removeContainers,
  ROOT,
  startTs,
  stop,
  unmountUnder,
} from './lib.js';
import { HELLO } from './sandbox/sandbox-bench.js';
import { describe, isReply, send, sleep, type Attempt } from './tenancy/http.js';
import type { NoisyCounts, NoisyMode } from './tenancy/noisy-client.js';

const env = process.env;
const phaseSeconds = Number(env.BENCH_PHASE_SECONDS ?? 8);
const rampMs = Number(env.BENCH_RAMP_MS ?? 1500);
const aConnections = Number(env.BENCH_A_CONNECTIONS ?? 4);
const timeoutMs = Number(env.BENCH_TIMEOUT_MS ?? 15_000);
const bombPairs = Number(env.BENCH_BOMB_PAIRS ?? 22);
const bombDoublings = Number(env.BENCH_BOMB_DOUBLINGS ?? 25);
const bodyBytes = Number(env.BENCH_BODY_BYTES ?? 1_000_000);
const bodyShape = env.BENCH_BODY_SHAPE === 'long' ? 'long' : 'wide';
// A phase's legitimate growth is B's call records and A's accepted jobs, a few MB; with audit
// entries capped at ~4 KB and A at 600/min, A's refusals add well under 1 MB.
const redisBoundMb = Number(env.BENCH_REDIS_BOUND_MB ?? 20);
const listingResults = Number(env.BENCH_LISTING_RESULTS ?? 1000);
const driver = env.BENCH_SANDBOX_DRIVER ?? 'docker';
const limitsWanted = env.BENCH_LIMITS ?? 'auto';
const A_LIMITS = { queued: 16, sandboxInFlight: 2 };
const A_RATE_PER_MINUTE = 600;
/** Phase (f)'s client A: the default `limits` (sandboxInFlight 4 = the worker's 4 slots). */
const SHARE_CLIENT = 'a-defaults';
const shareCallSeconds = Number(env.BENCH_SHARE_CALL_SECONDS ?? 12);
const SHARE_CALLS = 16;
const HEALTHZ_INTERVAL_MS = 20;
const HEALTHZ_TIMEOUT_MS = Math.min(timeoutMs, 5000);
/** Warm containers per image the worker keeps by default (sandbox.pool.size). */
const POOL_SIZE = parseSandboxConfig({}).pool.size;

interface PhaseSpec {
  id: string;
  label: string;
  /** B alone: its samples, pooled, are what the loaded phases are compared with. */
  reference?: boolean;
  mode?: NoisyMode;
  /** Starts an attacker of its own (in place of `mode`). */
  start?: () => Promise<{ stop(): Promise<NoisyCounts> }>;
  what?: string;
}
const ALL_PHASES: PhaseSpec[] = [
  { id: 'alone', label: 'B alone', reference: true },
  {
    id: 'flood',
    label: '(a) sandbox flood',
    mode: 'flood',
    what: 'run_shell "sleep 5" ?wait=false',
  },
  {
    id: 'bombs',
    label: '(b) policy bombs',
    mode: 'bombs',
    what: `brace ×${bombPairs} pairs, ${bombDoublings} variable doublings, 16 nested $(…) ?wait=false`,
  },
  {
    id: 'refusals',
    label: '(c) refusal flood',
    mode: 'refusals',
    what: `${(bodyBytes / 1e6).toFixed(1)} MB bodies (${bodyShape === 'wide' ? 'many short fields' : 'one long string'}): unknown tool, forbidden tool, invalid JSON, UTF-16`,
  },
  {
    id: 'listings',
    label: '(d) large results + listings',
    mode: 'listings',
    what: `GET /v1/calls (status=ok&limit=1, tool=<none of them>, limit=200) and /v1/stats over ${listingResults} results at the cap`,
  },
  {
    id: 'held',
    label: '(e) held connections',
    start: startHeldConnections,
    what: 'event-stream burst, MCP tasks/result polls, send-and-reset connections, 429s ignored',
  },
  // Once more at the end: the reference pools both, so a busy stretch of the machine during
  // one of them does not make every ratio look better or worse.
  { id: 'alone-again', label: 'B alone again', reference: true },
];

/** BENCH_PHASES=flood,bombs runs a subset (B alone always runs: it is the reference). */
const only = env.BENCH_PHASES?.split(',');
const PHASES = ALL_PHASES.filter((p) => p.reference || !only || only.includes(p.id));

// --- setup -------------------------------------------------------------------------------
const redisUrl = await benchRedis();
const dir = mkdtempSync(join(tmpdir(), 'toolgate-bench-tenancy-'));
// mkdtemp makes it 0700: the bwrap sandbox, under its own uid, must get through to the workspaces.
chmodSync(dir, 0o711);
const stateDir = join(dir, 'state');
const prefix = 'bench-tenancy';
const keys = new Keys(prefix);
const key = (id: string) => `bench-${id}-key-0123456789abcdef`;
// A fresh identity per phase: A's per-minute budget, spent in one phase, would otherwise
// silence A in the next (one window is longer than the three phases together).
const aClient = (mode: string) => `a-${mode}`;
const configPath = join(dir, 'toolgate.yaml');

function writeConfig(withLimits: boolean): void {
  const a = (mode: string) =>
    `  - { id: ${aClient(mode)}, key: ${key(aClient(mode))}, tools: [run_shell, calculator], ` +
    `rateLimit: { perMinute: ${A_RATE_PER_MINUTE} }` +
    (withLimits
      ? `, limits: { queued: ${A_LIMITS.queued}, sandboxInFlight: ${A_LIMITS.sandboxInFlight} }`
      : '') +
    ' }';
  writeFileSync(
    configPath,
    [
      'clients:',
      `  - { id: b, key: ${key('b')}, tools: [calculator, run_python], rateLimit: { perMinute: 100000000 } }`,
      a('flood'),
      a('bombs'),
      a('refusals'),
      a('listings'),
      a('held'),
      `  - { id: ${SHARE_CLIENT}, key: ${key(SHARE_CLIENT)}, tools: [run_shell] }`,
      'log: { level: warn }',
      'worker: { queues: [fast, sandbox], sandboxConcurrency: 4 }',
      'sandbox:',
      `  driver: ${driver}`,
      `  workspacesRoot: ${join(dir, 'workspaces')}`,
      `  stateDir: ${stateDir}`,
      '',
    ].join('\n'),
  );
}

const port = await freePort();
const metricsPort = await freePort();
const serviceEnv = {
  REDIS_URL: redisUrl,
  TOOLGATE_CONFIG: configPath,
  PORT: String(port),
  HOST: '127.0.0.1',
  WORKER_METRICS_PORT: String(metricsPort),
  TOOLGATE_REDIS_PREFIX: prefix,
  // `info`: the ready lines ("worker started", "gateway listening") are info lines.
  TOOLGATE_LOG_LEVEL: 'info',
};
const base = `http://127.0.0.1:${port}`;

/** The processes this run started, stopped by pid at the end (or on Ctrl-C). */
const started: { worker?: ChildProcess; gateway?: ChildProcess } = {};
const noisyChildren = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of noisyChildren) c.kill('SIGKILL');
});

type ServiceName = 'worker' | 'gateway';
const READY: Record<ServiceName, RegExp> = {
  worker: /worker started/,
  gateway: /gateway listening/,
};
/** A service that died while the run went on: reported in its phase, restarted after it. */
interface Crash {
  name: ServiceName;
  phase: string;
  how: string;
  /** The end of its output. */
  tail: string;
}
const crashes: Crash[] = [];
let currentPhase = 'start-up';

async function startService(name: ServiceName): Promise<ChildProcess> {
  const starting = startTs(`services/${name}/src/main.ts`, serviceEnv, READY[name]);
  const late = new AbortController();
  const child = await Promise.race([
    starting.finally(() => late.abort()),
    sleep(60_000, late.signal).then(() => {
      if (late.signal.aborted) return starting; // started (or failed) in time
      // Stop it when it does come up, so a slow start leaves nothing behind.
      void starting.then((c) => stop(c)).catch(() => undefined);
      throw new Error(`the ${name} did not start within 60 s`);
    }),
  ]);
  let tail = '';
  const keep = (b: Buffer) => (tail = (tail + b.toString()).slice(-2000));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  child.once('exit', (code, signal) => {
    if (started[name] !== child) return; // stopped on purpose
    started[name] = undefined;
    crashes.push({ name, phase: currentPhase, how: signal ?? `exit code ${code}`, tail });
  });
  return child;
}

/** Starts worker and gateway; false when this build's config loader refuses A's limits. */
async function startServices(withLimits: boolean): Promise<boolean> {
  writeConfig(withLimits);
  try {
    // The worker reads the same file with the same schema, so it is the one that refuses.
    started.worker = await startService('worker');
  } catch (err) {
    const message = (err as Error).message;
    if (withLimits && limitsWanted === 'auto' && /invalid configuration/.test(message)) {
      return false;
    }
    throw err;
  }
  started.gateway = await startService('gateway');
  return true;
}

console.log(
  `toolgate noisy-neighbour benchmark — Redis ${redisUrl}; ${driver} driver, sandboxConcurrency 4, ` +
    `pool ${POOL_SIZE}/image; phases of ${phaseSeconds} s (+${rampMs} ms ramp), A at ${aConnections} connections, ` +
    `${A_RATE_PER_MINUTE}/min; per-request deadline ${timeoutMs} ms`,
);
/**
 * Stops what this run started, by pid: client A, gateway, worker (SIGTERM: it removes its warm
 * containers), then removes any container of this run's deployment still there — counted, as
 * the run fails on it — and the throwaway Redis. Returns how many containers were left.
 */
async function shutdown(): Promise<number> {
  for (const c of noisyChildren) c.kill('SIGTERM');
  for (const name of ['gateway', 'worker'] as const) {
    const child = started[name];
    started[name] = undefined; // from here on an exit is expected
    if (child) await stop(child);
  }
  // Only this run's containers (its deployment), so a toolgate running beside it is left alone.
  const left = await deploymentContainers(stateDir).catch(() => [] as string[]);
  await removeContainers(left).catch(() => undefined);
  if (benchRedisPid !== undefined) process.kill(benchRedisPid, 'SIGTERM');
  unmountUnder(dir);
  rmSync(dir, { recursive: true, force: true });
  return left.length;
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`${signal}: stopping the processes this run started…`);
    void shutdown().finally(() => process.exit(130));
  });
}

const withLimits = limitsWanted !== 'off';
const limitsOn = withLimits && (await startServices(true));
if (!limitsOn) await startServices(false);
console.log(
  limitsOn
    ? `A's limits: queued ${A_LIMITS.queued}, sandboxInFlight ${A_LIMITS.sandboxInFlight} (accepted by this build)`
    : limitsWanted === 'off'
      ? "A's limits: off (BENCH_LIMITS=off)"
      : "A's limits: not supported by this build's config (clients[].limits refused); running without",
);

const redis = new Redis(redisUrl, { maxRetriesPerRequest: null });
const sandboxQueue = new CallQueue(redis, keys, 'sandbox');
const bAgent = new Agent({ keepAlive: true, maxSockets: 2 });
const healthAgent = new Agent({ keepAlive: true, maxSockets: 1 });

async function usedMemory(): Promise<number> {
  const info = await redis.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)?.[1] ?? NaN);
}

/** The worker's warm containers per image, from its own /metrics. */
async function warm(): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(
    /toolgate_sandbox_warm_containers\{[^}]*image="(\w+)"[^}]*\} (\d+)/g,
  ))
    out[m[1]!] = Number(m[2]);
  return out;
}
async function poolFull(): Promise<void> {
  if (driver !== 'docker') return; // bwrap keeps no containers warm
  for (let i = 0; i < 300; i++) {
    const w = await warm().catch(() => ({}) as Record<string, number>);
    if ((w.python ?? 0) >= POOL_SIZE && (w.shell ?? 0) >= POOL_SIZE) return;
    await sleep(100);
  }
}

/**
 * Between phases, outside any measurement: A's leftovers (today, hundreds of queued 5 s calls)
 * would otherwise weigh on the next phase. Removes waiting sandbox jobs, waits for running ones
 * and for the warm pool to refill; restarts a service that died. Returns how many jobs were
 * removed.
 */
async function settle(): Promise<number> {
  for (const name of ['worker', 'gateway'] as const) {
    if (!started[name]) started[name] = await startService(name);
  }
  // Waiting and put-back calls out of the queue, and out of their clients' in-flight sets.
  let removed = 0;
  for (const waiting of await sandboxQueue.queue.getJobs(['prioritized', 'wait', 'delayed'])) {
    if (!waiting?.id) continue;
    const job = await sandboxQueue.remove(waiting.id);
    if (!job) continue;
    removed++;
    await redis.zrem(keys.inFlight(job.clientId, 'sandbox'), waiting.id);
  }
  for (let i = 0; i < 300; i++) {
    const { active } = await sandboxQueue.counts();
    if (active === 0) break;
    await sleep(100);
  }
  await poolFull();
  return removed;
}

// --- the /healthz poller -----------------------------------------------------------------
const healthz = new Map<string, { ms: number[]; failed: number }>();
let healthPhase: string | undefined;
let polling = true;
const poller = (async () => {
  while (polling) {
    const t0 = performance.now();
    const phase = healthPhase;
    const a = await send(`${base}/healthz`, { agent: healthAgent, timeoutMs: HEALTHZ_TIMEOUT_MS });
    if (phase) {
      const h = healthz.get(phase) ?? { ms: [], failed: 0 };
      healthz.set(phase, h);
      h.ms.push(a.ms);
      if (!isReply(a) || a.status !== 200) h.failed++;
    }
    await sleep(Math.max(0, HEALTHZ_INTERVAL_MS - (performance.now() - t0)));
  }
})();

// --- client B ----------------------------------------------------------------------------
interface Series {
  /** Latency of every call; a timed-out call counts with the time it was given. */
  ms: number[];
  failed: number;
  timedOut: number;
  /** The first distinct unexpected answers, to show what went wrong. */
  samples: string[];
}

function callB(tool: string, args: unknown): Promise<Attempt> {
  return send(`${base}/tools/${tool}/execute`, {
    agent: bAgent,
    method: 'POST',
    headers: { authorization: `Bearer ${key('b')}`, 'content-type': 'application/json' },
    body: JSON.stringify(args),
    timeoutMs,
  });
}

/** Calls `one` back to back until `until`; each call checks its own answer. */
async function loop(
  until: number,
  one: (i: number) => Promise<{ attempt: Attempt; ok: boolean }>,
): Promise<Series> {
  const s: Series = { ms: [], failed: 0, timedOut: 0, samples: [] };
  for (let i = 1; performance.now() < until; i++) {
    const { attempt, ok } = await one(i);
    s.ms.push(attempt.ms);
    if (ok) continue;
    s.failed++;
    if (!isReply(attempt) && attempt.status === 'timeout') s.timedOut++;
    const why = isReply(attempt) ? describe(attempt) : `${attempt.status}: ${attempt.message}`;
    if (s.samples.length < 3 && !s.samples.includes(why)) s.samples.push(why);
  }
  return s;
}

/**
 * B's calculator calls, then its run_python calls, each back to back for half of `seconds`
 * (one after the other, so container starts after each run_python do not land in the
 * calculator's figures).
 */
async function measureB(seconds: number): Promise<{ calc: Series; python: Series }> {
  const half = (seconds * 1000) / 2;
  const calc = await loop(performance.now() + half, async (i) => {
    // A different expression each time: no result cache in the way.
    const attempt = await callB('calculator', { expression: `${i}*2+1` });
    const ok =
      isReply(attempt) &&
      attempt.status === 200 &&
      (JSON.parse(attempt.body) as { result?: unknown }).result === i * 2 + 1;
    return { attempt, ok };
  });
  const python = await loop(performance.now() + half, async () => {
    const attempt = await callB('run_python', { code: HELLO });
    const ok =
      isReply(attempt) &&
      attempt.status === 200 &&
      (JSON.parse(attempt.body) as { result?: { stdout?: string } }).result?.stdout ===
        'hello world\n';
    return { attempt, ok };
  });
  return { calc, python };
}

// --- client A ----------------------------------------------------------------------------

/** Starts A in its own process; resolves once it is sending. `stop()` returns its counts. */
async function startNoisy(mode: NoisyMode): Promise<{ stop(): Promise<NoisyCounts> }> {
  const child = spawn(
    process.execPath,
    ['--conditions=@toolgate/source', '--import', 'tsx', 'bench/tenancy/noisy-client.ts'],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        NOISY_URL: base,
        NOISY_KEY: key(aClient(mode)),
        NOISY_MODE: mode,
        NOISY_CONNECTIONS: String(aConnections),
        NOISY_TIMEOUT_MS: String(timeoutMs),
        NOISY_BOMB_PAIRS: String(bombPairs),
        NOISY_BOMB_DOUBLINGS: String(bombDoublings),
        NOISY_BODY_BYTES: String(bodyBytes),
        NOISY_BODY_SHAPE: bodyShape,
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  noisyChildren.add(child);
  const counts = new Promise<NoisyCounts>((resolve, reject) => {
    child.on('message', (m) => {
      if (typeof m === 'object' && m !== null && 'counts' in m) resolve(m.counts as NoisyCounts);
    });
    child.once('exit', (code) => reject(new Error(`client A (${mode}) exited (${code})`)));
  });
  await new Promise<void>((resolve, reject) => {
    child.on('message', (m) => m === 'started' && resolve());
    child.once('exit', (code) => reject(new Error(`client A (${mode}) exited (${code}) early`)));
  });
  return {
    async stop() {
      child.send('stop');
      const result = await counts;
      await new Promise<void>((resolve) =>
        child.exitCode !== null ? resolve() : child.once('exit', () => resolve()),
      );
      noisyChildren.delete(child);
      return result;
    },
  };
}

/**
 * Before the listings phase, outside its measurement: `n` finished calls of `client`, each with
 * a ~300 KB result, written as the worker writes them (CallStore caps each stored result at
 * calls.maxResultBytes, 256 KiB; CallIndex keeps the client's newest 1000).
 */
async function fillLargeResults(client: string, n: number): Promise<void> {
  const store = new CallStore(redis, keys, 86_400, 262_144);
  const index = new CallIndex(redis, keys, 86_400);
  const result = { status: 200, body: 'x'.repeat(300_000) };
  for (let i = 0; i < n; i += 50) {
    const multi = redis.multi();
    const ids: string[] = [];
    for (let j = i; j < Math.min(n, i + 50); j++) {
      const id = randomUUID();
      ids.push(id);
      const outcome = {
        id,
        tool: 'http_get',
        status: 'ok' as const,
        result,
        durationMs: 40,
        cached: false,
      };
      store.addTo(
        multi,
        finishedRecord(
          { id, tool: 'http_get', clientId: client, acceptedAt: Date.now() },
          'fast',
          outcome,
        ),
      );
    }
    index.addTo(multi, client, ids);
    await multi.exec();
  }
}

/**
 * Client A of the "held connections" phase (bench/tenancy/held-client.ts, its own process):
 * tries to hold as many gateway connections as it can on one long call of its own. Prints how
 * many of its budget's slots it held at most (sampled from Redis), against the cap of 16.
 */
async function startHeldConnections(): Promise<{ stop(): Promise<NoisyCounts> }> {
  const id = aClient('held');
  const child = spawn(
    process.execPath,
    ['--conditions=@toolgate/source', '--import', 'tsx', 'bench/tenancy/held-client.ts'],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        NOISY_URL: base,
        NOISY_KEY: key(id),
        NOISY_TIMEOUT_MS: String(timeoutMs),
        // Outlasts the phase; cancelled at its end (or ends soon after).
        HELD_CALL_SECONDS: String(Math.ceil(phaseSeconds + rampMs / 1000) + 5),
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  noisyChildren.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const counts = new Promise<NoisyCounts>((resolve, reject) => {
    child.on('message', (m) => {
      if (typeof m === 'object' && m !== null && 'counts' in m) resolve(m.counts as NoisyCounts);
    });
    void exited.then(() => reject(new Error('client A (held) exited')));
  });
  await new Promise<void>((resolve, reject) => {
    child.on('message', (m) => m === 'started' && resolve());
    void exited.then(() => reject(new Error('client A (held) exited early')));
  });
  const commands = async () =>
    Number(/total_commands_processed:(\d+)/.exec(await redis.info('stats'))?.[1]);
  const phaseStart = { at: performance.now(), n: await commands() };
  let most = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      most = Math.max(most, await redis.zcard(keys.heldConnections(id)));
      await sleep(50);
    }
  })();
  return {
    async stop() {
      child.send('stop');
      const result = await counts;
      await exited;
      noisyChildren.delete(child);
      sampling = false;
      await sampler;
      const during = (await commands()) - phaseStart.n;
      const seconds = (performance.now() - phaseStart.at) / 1000;
      // What A leaves behind: watchers of connections that are gone would keep Redis busy.
      const afterStart = await commands();
      await sleep(2000);
      const after = ((await commands()) - afterStart) / 2;
      const ok = most <= 16 && after < 100;
      console.log(
        `  A held at most ${most} connections at once (limit 16); Redis ran ${Math.round(during / seconds)} ` +
          `commands/s during the phase, ${Math.round(after)}/s in the 2 s after A left (target < 100)  ${ok ? 'PASS' : 'FAIL'}`,
      );
      return result;
    },
  };
}

// --- (f) default fair share (issue 19, item 8) ------------------------------------------

/**
 * A queues 16 `run_shell "sleep 12"` calls (?wait=false) with the default limits, the cap
 * equal to the slots; once 4 of them run, B's run_python calls back to back for a phase's
 * length (shorter than A's calls, so A's four hold their slots throughout), against B's
 * run_python alone just before. Target: B p50 ≤ 3× alone, no B call failed, and A's four still
 * running at the end (B never waited for one of them). Self-contained: prints its own lines,
 * cancels A's calls, settles; returns whether it passed (true when BENCH_PHASES leaves it out).
 */
async function defaultShareFlood(): Promise<boolean> {
  if (only && !only.includes('default-share')) return true;
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  const asA = (path: string, body?: unknown) =>
    send(`${base}${path}`, {
      agent,
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${key(SHARE_CLIENT)}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      timeoutMs,
    });
  const pythonFor = (seconds: number) =>
    loop(performance.now() + seconds * 1000, async () => {
      const attempt = await callB('run_python', { code: HELLO });
      const ok =
        isReply(attempt) &&
        attempt.status === 200 &&
        (JSON.parse(attempt.body) as { result?: { stdout?: string } }).result?.stdout ===
          'hello world\n';
      return { attempt, ok };
    });
  const statuses = async (ids: string[]) =>
    Promise.all(
      ids.map(async (id) => {
        const a = await asA(`/v1/calls/${id}`);
        return isReply(a) && a.status === 200
          ? (JSON.parse(a.body) as { status: string }).status
          : '?';
      }),
    );
  const ids: string[] = [];
  try {
    currentPhase = 'default-share';
    const alone = await pythonFor(phaseSeconds);
    for (let i = 0; i < SHARE_CALLS; i++) {
      const a = await asA('/tools/run_shell/execute?wait=false', {
        command: `sleep ${shareCallSeconds}`,
      });
      if (!isReply(a) || a.status !== 202)
        throw new Error(`A's call ${i} was not accepted: ${isReply(a) ? describe(a) : a.message}`);
      ids.push((JSON.parse(a.body) as { id: string }).id);
    }
    let first: string[] = [];
    for (let i = 0; i < 300 && first.length < 4; i++) {
      await sleep(100);
      const now = await statuses(ids);
      first = ids.filter((_, j) => now[j] === 'running');
    }
    const beside = await pythonFor(phaseSeconds);
    // The same four still running: B never had to wait for one of them to end.
    const holding = (await statuses(first)).filter((s) => s === 'running').length;
    const aloneP50 = p50(alone.ms);
    const besideP50 = p50(beside.ms);
    const ratio = besideP50 / aloneP50;
    const ok =
      alone.failed === 0 &&
      beside.failed === 0 &&
      beside.ms.length > 0 &&
      ratio <= 3 &&
      first.length === 4 &&
      holding === 4;
    console.log(
      `(f) default fair share — A: ${SHARE_CALLS} × run_shell "sleep ${shareCallSeconds}" ?wait=false, ` +
        `default limits (sandboxInFlight 4, the worker's sandboxConcurrency 4)`,
    );
    console.log(
      `  A running at once before B started: ${first.length}; of those, still running when B ended: ${holding}`,
    );
    console.log(
      `  B run_python   alone p50 ${aloneP50.toFixed(0)} ms (${alone.ms.length} calls); beside A p50 ${besideP50.toFixed(0)} ms, ` +
        `max ${Math.max(...beside.ms).toFixed(0)} ms (${beside.ms.length} calls, ${beside.failed} failed${beside.samples.length ? `: ${beside.samples.join(', ')}` : ''})` +
        `   p50 ×${ratio.toFixed(2)} alone, target ≤ 3×  ${ok ? 'PASS' : 'FAIL'}`,
    );
    return ok;
  } catch (err) {
    console.error('(f) default fair share failed:', err);
    return false;
  } finally {
    currentPhase = 'after default-share';
    // A's long calls out of the way: cancelled (queued ones never run), then the usual settle.
    await Promise.all(ids.map((id) => asA(`/v1/calls/${id}/cancel`, {})));
    await settle().catch(() => undefined);
    agent.destroy();
  }
}

function p50(ms: number[]): number {
  return percentile(
    [...ms].sort((x, y) => x - y),
    50,
  );
}

// --- the phases --------------------------------------------------------------------------
interface PhaseResult {
  spec: PhaseSpec;
  calc: Series;
  python: Series;
  health: { ms: number[]; failed: number };
  redisGrowth: number;
  a?: NoisyCounts;
  removedAfter: number;
}

const results: PhaseResult[] = [];
try {
  await poolFull();
  // First-use costs (workspace, page cache, JIT) out of the sample.
  await measureB(1);
  for (const spec of PHASES) {
    if (spec.mode === 'listings') await fillLargeResults(aClient('listings'), listingResults);
    const memBefore = await usedMemory();
    healthPhase = currentPhase = spec.id;
    const noisy = spec.start
      ? await spec.start()
      : spec.mode
        ? await startNoisy(spec.mode)
        : undefined;
    if (noisy) await sleep(rampMs);
    const { calc, python } = await measureB(phaseSeconds);
    const a = await noisy?.stop();
    healthPhase = undefined;
    currentPhase = `after ${spec.id}`;
    const redisGrowth = (await usedMemory()) - memBefore;
    const removedAfter = await settle();
    results.push({
      spec,
      calc,
      python,
      health: healthz.get(spec.id) ?? { ms: [], failed: 0 },
      redisGrowth,
      ...(a ? { a } : {}),
      removedAfter,
    });
    console.log(`  ${spec.label} done`);
  }
} catch (err) {
  // Whatever broke, the worker still gets its SIGTERM and removes its containers.
  console.error('the benchmark failed:', err);
  await shutdown();
  process.exit(2);
}

// (f), after the others: its client keeps the default limits whatever BENCH_LIMITS says.
const shareOk = await defaultShareFlood();

// --- teardown ----------------------------------------------------------------------------
polling = false;
await poller;
bAgent.destroy();
healthAgent.destroy();
redis.disconnect();
const leftBehind = await shutdown();

// --- report ------------------------------------------------------------------------------
const sorted = (xs: number[]) => [...xs].sort((x, y) => x - y);
const p = (xs: number[], q: number) => percentile(sorted(xs), q);
const fmt = (ms: number) => (Number.isFinite(ms) ? (ms < 10 ? ms.toFixed(2) : ms.toFixed(0)) : '—');
const mb = (bytes: number) => `${bytes >= 0 ? '+' : ''}${(bytes / 1048576).toFixed(1)} MB`;
const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
/** A figure that includes timed-out calls is only a lower bound. */
const atLeast = (timedOut: boolean) => (timedOut ? '≥' : '');
const references = results.filter((r) => r.spec.reference);
const aloneCalcP99 = p(
  references.flatMap((r) => r.calc.ms),
  99,
);
const alonePyP50 = p(
  references.flatMap((r) => r.python.ms),
  50,
);
console.log('');
console.log(
  `reference, B alone (first and last phase pooled): calculator p99 ${fmt(aloneCalcP99)} ms, run_python p50 ${fmt(alonePyP50)} ms`,
);
const failures = (s: Series) =>
  s.failed === 0
    ? `${s.ms.length} calls`
    : `${s.ms.length} calls, ${s.failed} failed (${s.timedOut} timed out; ${s.samples.join(', ')})`;

interface Row {
  phase: string;
  calcRatio: string;
  pyRatio: string;
  healthP99: string;
  growth: number;
  pass: boolean;
}
const rows: Row[] = [];
console.log('');
for (const r of results) {
  const calcP99 = p(r.calc.ms, 99);
  const pyP50 = p(r.python.ms, 50);
  const hp99 = p(r.health.ms, 99);
  const calcRatio = calcP99 / aloneCalcP99;
  const pyRatio = pyP50 / alonePyP50;
  const calcBound = atLeast(r.calc.timedOut > 0);
  const pyBound = atLeast(r.python.timedOut > 0);
  const healthBound = atLeast(r.health.failed > 0);
  const loaded = !r.spec.reference;
  const died = crashes.filter((c) => c.phase === r.spec.id);
  const calcOk = r.calc.failed === 0 && r.calc.ms.length > 0 && (!loaded || calcRatio <= 2);
  const pyOk = r.python.failed === 0 && r.python.ms.length > 0 && (!loaded || pyRatio <= 3);
  const healthOk = r.health.failed === 0 && hp99 < 50;
  const redisOk = r.redisGrowth < redisBoundMb * 1048576;
  rows.push({
    phase: r.spec.label,
    calcRatio: `${calcBound}${calcRatio.toFixed(2)}`,
    pyRatio: `${pyBound}${pyRatio.toFixed(2)}`,
    healthP99: `${healthBound}${fmt(hp99)} ms`,
    growth: r.redisGrowth,
    pass: calcOk && pyOk && healthOk && redisOk && died.length === 0,
  });
  console.log(`${r.spec.label}${r.spec.what ? ` — A: ${r.spec.what}` : ''}`);
  console.log(
    `  B calculator   p50 ${calcBound}${fmt(p(r.calc.ms, 50))} ms  p99 ${calcBound}${fmt(calcP99)} ms  (${failures(r.calc)})` +
      (loaded
        ? `   p99 ×${calcBound}${calcRatio.toFixed(2)} alone, target ≤ 2×  ${verdict(calcOk)}`
        : ''),
  );
  console.log(
    `  B run_python   p50 ${pyBound}${fmt(pyP50)} ms  (${failures(r.python)})` +
      (loaded
        ? `   p50 ×${pyBound}${pyRatio.toFixed(2)} alone, target ≤ 3×  ${verdict(pyOk)}`
        : ''),
  );
  console.log(
    `  /healthz       p99 ${healthBound}${fmt(hp99)} ms  max ${healthBound}${fmt(Math.max(...r.health.ms))} ms  (${r.health.ms.length} polls, ${r.health.failed} failed)   target p99 < 50 ms  ${verdict(healthOk)}`,
  );
  console.log(
    `  Redis          used_memory ${mb(r.redisGrowth)}` +
      (r.a?.sent ? ` (${Math.round(r.redisGrowth / r.a.sent / 1024)} KB per request of A)` : '') +
      `   target < ${redisBoundMb} MB  ${verdict(redisOk)}`,
  );
  if (r.a) {
    const codes = Object.entries(r.a.codes)
      .sort(([, x], [, y]) => y - x)
      .map(([c, n]) => `${c} ${n}`)
      .join(', ');
    console.log(
      `  A              sent ${r.a.sent}: 2xx ${r.a.answered}, refused ${r.a.refused}, 429 ${r.a.limited}, ` +
        `errors ${r.a.errors}, timeouts ${r.a.timeouts}, cut at phase end ${r.a.unfinished}  [${codes}]`,
    );
  }
  for (const c of died) {
    console.log(`  ${c.name} DIED during this phase (${c.how}); restarted after it. Last output:`);
    console.log(c.tail.replace(/^/gm, '    | '));
  }
  if (r.removedAfter > 0) {
    console.log(
      `  (afterwards, outside the measurement: ${r.removedAfter} queued sandbox jobs removed)`,
    );
  }
}

console.log('');
console.log(
  `${'phase'.padEnd(20)} ${'calc p99 ×'.padStart(11)} ${'python p50 ×'.padStart(13)} ${'healthz p99'.padStart(12)} ${'Redis'.padStart(11)}  verdict`,
);
for (const row of rows) {
  console.log(
    `${row.phase.padEnd(20)} ${row.calcRatio.padStart(11)} ${row.pyRatio.padStart(13)} ${row.healthP99.padStart(12)} ${mb(row.growth).padStart(11)}  ${verdict(row.pass)}`,
  );
}
console.log(
  `targets: calc p99 ≤ 2× alone, run_python p50 ≤ 3× alone, no B call failed or timed out (${timeoutMs} ms), /healthz p99 < 50 ms, Redis growth < ${redisBoundMb} MB`,
);
console.log(`containers left after the run: ${leftBehind}   target 0`);
// A death outside a measured phase (e.g. while A's leftovers ran) still fails the run.
const between = crashes.filter((c) => !results.some((r) => r.spec.id === c.phase));
for (const c of between) console.log(`${c.name} DIED ${c.phase} (${c.how})`);
process.exit(
  rows.every((r) => r.pass) && shareOk && leftBehind === 0 && between.length === 0 ? 0 : 1,
);
