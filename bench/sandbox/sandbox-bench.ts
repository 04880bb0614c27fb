/**
 * Sandbox path benchmarks (docs/spec.md §9, issue 20), as ratios measured in one run on one
 * machine:
 *  - run_python hello-world through the docker driver + warm pool vs a plain `docker run --rm`
 *    of the same image (p50 ratio, target ≤ 0.1), and where a warm call's time goes (the
 *    driver's phases, RunPhases);
 *  - the same through the bwrap driver vs a bare `bwrap` start of the same rootfs (≤ 1.5);
 *  - sustained load at concurrency 8 for 30 s: calls/s against raw `docker run --rm` at the same
 *    concurrency (target ≥ 1.5×), errors, containers left afterwards (0).
 * The helpers (latency sampling, sustained load, plain baselines) are exported for the
 * gateway end-to-end variant.
 *
 * Imports are relative: bench/ has no package.json listing the workspace packages yet.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { ToolContext } from '@toolgate/registry';
import {
  createSandbox,
  createWorkspaces,
  type RunPhases,
  type Sandbox,
  type SandboxHooks,
} from '@toolgate/sandbox';
import { REPO_ROOT, testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { runPython } from '@toolgate/tools';

const exec = promisify(execFile);

export const HELLO = 'print("hello world")';
export const PYTHON_IMAGE = 'toolgate/sandbox-python:local';

export interface LatencyStats {
  samples: number;
  p50Ms: number;
  p95Ms: number;
  minMs: number;
}

export interface SustainedStats {
  seconds: number;
  concurrency: number;
  calls: number;
  errors: number;
  callsPerSecond: number;
  p50Ms: number;
}

/** One row of the warm call's breakdown: a phase's p50 and its share of the call's p50. */
export interface PhaseRow {
  phase: string;
  p50Ms: number;
  /** Of the whole call's p50; null for work off the call's path (the refill). */
  share: number | null;
}

export interface SandboxBenchReport {
  docker?: {
    warmPool: LatencyStats;
    plainDockerRun: LatencyStats;
    p50Ratio: number;
    /** Where a warm call's time goes, in call order, then the refill (off the path). */
    phases: PhaseRow[];
    sustained: SustainedStats;
    /** Raw `docker run --rm` loops at the same concurrency and length, alternating with it. */
    plainSustained: SustainedStats;
    throughputRatio: number;
    containersLeft: number;
  };
  bwrap?: { driver: LatencyStats; bareBwrap: LatencyStats; p50Ratio: number };
  skipped: Record<string, string>;
}

export interface SandboxBenchOptions {
  /** Samples per latency measurement (default 15). */
  samples?: number;
  sustainSeconds?: number;
  concurrency?: number;
  log?: (line: string) => void;
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return (
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ??
    NaN
  );
}

/** p50, p95 and min of samples in ms. */
export function latencyStats(values: number[]): LatencyStats {
  return {
    samples: values.length,
    p50Ms: round(percentile(values, 50)),
    p95Ms: round(percentile(values, 95)),
    minMs: round(Math.min(...values)),
  };
}

const round = (n: number) => Math.round(n * 10) / 10;

/** Times `fn` `samples` times, one after another; `before` runs untimed ahead of each sample. */
export async function sampleLatency(
  fn: () => Promise<unknown>,
  samples: number,
  before?: () => Promise<unknown>,
): Promise<LatencyStats> {
  const times: number[] = [];
  for (let i = 0; i < samples; i++) {
    await before?.();
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  return latencyStats(times);
}

/** One window of closed-loop load: its length, each completed call's time, the failures. */
export interface LoadWindow {
  elapsedS: number;
  times: number[];
  errors: number;
}

/** Runs `fn` from `concurrency` loops for `seconds`; counts completed calls and failures. */
export async function sustain(
  fn: () => Promise<unknown>,
  seconds: number,
  concurrency: number,
): Promise<SustainedStats> {
  return summarize([await loadWindow(fn, seconds, concurrency)], concurrency);
}

export async function loadWindow(
  fn: () => Promise<unknown>,
  seconds: number,
  concurrency: number,
): Promise<LoadWindow> {
  const deadline = performance.now() + seconds * 1000;
  const times: number[] = [];
  let errors = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const s = performance.now();
        try {
          await fn();
          times.push(performance.now() - s);
        } catch {
          errors++;
        }
      }
    }),
  );
  return { elapsedS: (performance.now() - t0) / 1000, times, errors };
}

/** Windows of the same load, as one: calls over their summed length. */
export function summarize(windows: LoadWindow[], concurrency: number): SustainedStats {
  const elapsed = windows.reduce((s, w) => s + w.elapsedS, 0);
  const times = windows.flatMap((w) => w.times);
  return {
    seconds: round(elapsed),
    concurrency,
    calls: times.length,
    errors: windows.reduce((s, w) => s + w.errors, 0),
    callsPerSecond: round(times.length / elapsed),
    p50Ms: round(percentile(times, 50)),
  };
}

/** The baseline: `docker run --rm` of the python image running the same hello world. */
export function plainDockerRun(image = PYTHON_IMAGE): Promise<unknown> {
  return exec('docker', [
    'run',
    '--rm',
    '--network',
    'none',
    '--entrypoint',
    'python3',
    image,
    '-c',
    HELLO,
  ]);
}

/** The baseline: a bare bwrap over the same rootfs, no limits, no cgroup, no wrapper. */
export function bareBwrap(
  rootfs = path.join(REPO_ROOT, 'deploy/sandbox/.build/rootfs/python'),
): Promise<unknown> {
  return exec('bwrap', [
    '--unshare-all',
    '--ro-bind',
    rootfs,
    '/',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--',
    'python3',
    '-c',
    HELLO,
  ]);
}

/** run_python through its handler, as the worker calls it. */
export function toolCall(sandbox: Sandbox, clientId = 'bench'): () => Promise<unknown> {
  const workspaces = createWorkspaces(sandbox.config);
  let n = 0;
  return async () => {
    const ctx: ToolContext = {
      callId: `bench-${++n}`,
      clientId,
      signal: new AbortController().signal,
      services: { sandbox, workspaces },
    };
    const r = await runPython.handler({ code: HELLO }, ctx);
    if (r.exitCode !== 0 || r.stdout !== 'hello world\n')
      throw new Error(`unexpected result: ${JSON.stringify(r)}`);
  };
}

/** Targets of issue 20 for the docker lines. */
export const TARGETS = { p50Ratio: 0.1, throughputRatio: 1.5 } as const;

/**
 * The warm samples: each call through the tool handler, pool refilled before it, with the
 * driver's phases (onRun) placed on the bench's clock: what precedes run() is the handler's
 * workspace check, what follows the output is the result's way back.
 */
async function warmBreakdown(
  call: () => Promise<unknown>,
  samples: number,
  refill: () => Promise<unknown>,
  last: { phases?: RunPhases; refills: number[] },
): Promise<{ latency: LatencyStats; phases: PhaseRow[] }> {
  const totals: number[] = [];
  const rows: Record<string, number[]> = {
    'handler: workspace check': [],
    'checkout from the pool': [],
    'workspace mount': [],
    'exec (call written → exit reported)': [],
    'output collection': [],
    'return (result → caller)': [],
  };
  const cols = Object.values(rows);
  last.refills.length = 0;
  for (let i = 0; i < samples; i++) {
    await refill();
    last.phases = undefined;
    const t0 = performance.now();
    await call();
    const t1 = performance.now();
    const p = last.phases as RunPhases | undefined;
    if (!p) throw new Error('the docker driver reported no phases');
    totals.push(t1 - t0);
    const outputIn = p.startedAt + p.checkoutMs + p.mountMs + p.execMs + p.collectMs;
    [p.startedAt - t0, p.checkoutMs, p.mountMs, p.execMs, p.collectMs, t1 - outputIn].forEach(
      (v, j) => cols[j]!.push(v),
    );
  }
  const latency = latencyStats(totals);
  const phases: PhaseRow[] = Object.entries(rows).map(([phase, v]) => {
    const p50 = percentile(v, 50);
    return { phase, p50Ms: round(p50), share: round2(p50 / latency.p50Ms) };
  });
  phases.push({
    phase: 'refill (starts after the output is in; off the path)',
    p50Ms: round(percentile(last.refills, 50)),
    share: null,
  });
  return { latency, phases };
}

async function countContainers(ownerId?: string): Promise<number> {
  const filter = ownerId
    ? ['--filter', `label=toolgate.owner=${ownerId}`]
    : ['--filter', 'label=toolgate.sandbox=1'];
  const { stdout } = await exec('docker', ['ps', '-aq', ...filter]);
  return stdout.split('\n').filter(Boolean).length;
}

export async function runSandboxBench(
  options: SandboxBenchOptions = {},
): Promise<SandboxBenchReport> {
  const samples = options.samples ?? 15;
  const seconds = options.sustainSeconds ?? 30;
  const concurrency = options.concurrency ?? 8;
  const log = options.log ?? (() => undefined);
  const report: SandboxBenchReport = { skipped: {} };
  const dir = await mkdtemp(path.join(tmpdir(), 'tg-bench-'));
  await chmod(dir, 0o711);
  try {
    const dockerWhy = await whyDriverUnavailable('docker');
    if (dockerWhy) report.skipped.docker = dockerWhy;
    else {
      const seen: { phases?: RunPhases; refills: number[] } = { refills: [] };
      const hooks: SandboxHooks = {
        onRun: ({ phases }) => (seen.phases = phases),
        onStart: ({ pooled, durationMs }) => void (pooled && seen.refills.push(durationMs)),
      };
      const sandbox = await createSandbox(
        testSandboxConfig('docker', dir, { pool: { size: concurrency } }),
        { hooks },
      );
      const call = toolCall(sandbox);
      await sandbox.warmUp();
      await call(); // first-use costs (workspace creation, page cache) out of the sample
      log(`docker: ${samples} warm-pool calls (pool refilled before each)…`);
      const warm = await warmBreakdown(call, samples, () => sandbox.warmUp(), seen);
      log(`docker: ${samples} plain docker run --rm…`);
      await plainDockerRun();
      const plain = await sampleLatency(plainDockerRun, samples);
      // The driver's load and raw docker run --rm at the same concurrency, in halves ordered
      // driver, raw, raw, driver: a background load that drifts during the run (a shared
      // machine) weighs on both alike. Each half starts with the pool full, as the first did.
      log(
        `docker: sustained ${seconds}s at concurrency ${concurrency}, and raw docker run --rm as long, in alternating halves…`,
      );
      const windows: Record<'driver' | 'raw', LoadWindow[]> = { driver: [], raw: [] };
      for (const which of ['driver', 'raw', 'raw', 'driver'] as const) {
        await sandbox.warmUp();
        windows[which].push(
          await loadWindow(which === 'driver' ? call : plainDockerRun, seconds / 2, concurrency),
        );
      }
      const sustained = summarize(windows.driver, concurrency);
      const plainSustained = summarize(windows.raw, concurrency);
      const owner = (sandbox as unknown as { ownerId?: string }).ownerId;
      await sandbox.close();
      const containersLeft = await countContainers(owner);
      report.docker = {
        warmPool: warm.latency,
        plainDockerRun: plain,
        p50Ratio: round2(warm.latency.p50Ms / plain.p50Ms),
        phases: warm.phases,
        sustained,
        plainSustained,
        throughputRatio: round2(sustained.callsPerSecond / plainSustained.callsPerSecond),
        containersLeft,
      };
    }

    const bwrapWhy = await whyDriverUnavailable('bwrap');
    if (bwrapWhy) report.skipped.bwrap = bwrapWhy;
    else {
      const sandbox = await createSandbox(testSandboxConfig('bwrap', dir, { pool: { size: 2 } }));
      const call = toolCall(sandbox);
      await call();
      await bareBwrap();
      log(`bwrap: ${samples * 2} driver calls and bare bwrap starts, interleaved…`);
      const driverTimes: number[] = [];
      const bareTimes: number[] = [];
      for (let i = 0; i < samples * 2; i++) {
        await sandbox.warmUp(); // launcher pool full, as for the docker samples
        let t0 = performance.now();
        await call();
        driverTimes.push(performance.now() - t0);
        t0 = performance.now();
        await bareBwrap();
        bareTimes.push(performance.now() - t0);
      }
      await sandbox.close();
      const d = latencyStats(driverTimes);
      const b = latencyStats(bareTimes);
      report.bwrap = { driver: d, bareBwrap: b, p50Ratio: round2(d.p50Ms / b.p50Ms) };
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return report;
}

const round2 = (n: number) => Math.round(n * 100) / 100;

export function formatReport(r: SandboxBenchReport): string {
  const lines: string[] = [];
  if (r.docker) {
    const d = r.docker;
    const load = (s: SustainedStats) =>
      `${s.callsPerSecond} calls/s, ${s.calls} calls, ${s.errors} errors, p50 ${s.p50Ms} ms`;
    lines.push(
      `run_python via docker warm pool  p50 ${d.warmPool.p50Ms} ms (p95 ${d.warmPool.p95Ms})`,
      `plain docker run --rm            p50 ${d.plainDockerRun.p50Ms} ms (p95 ${d.plainDockerRun.p95Ms})`,
      `  p50 ratio ${d.p50Ratio} (target <= ${TARGETS.p50Ratio}) ${passFail(d.p50Ratio <= TARGETS.p50Ratio)}`,
      `where a warm call's time goes (p50 of each phase over the samples; shares of the call's p50):`,
      ...formatPhases(d.phases),
      `sustained ${d.sustained.seconds} s at concurrency ${d.sustained.concurrency}: ${load(d.sustained)}`,
      `raw docker run --rm ${d.plainSustained.seconds} s at concurrency ${d.plainSustained.concurrency}: ${load(d.plainSustained)}`,
      `  throughput ratio ${d.throughputRatio} (target >= ${TARGETS.throughputRatio}) ${passFail(d.throughputRatio >= TARGETS.throughputRatio)}`,
      `  containers left afterwards: ${d.containersLeft} (target 0) ${passFail(d.containersLeft === 0)}`,
    );
  }
  if (r.bwrap) {
    const b = r.bwrap;
    lines.push(
      `run_python via bwrap driver      p50 ${b.driver.p50Ms} ms (p95 ${b.driver.p95Ms})`,
      `bare bwrap                       p50 ${b.bareBwrap.p50Ms} ms (p95 ${b.bareBwrap.p95Ms})`,
      `  p50 ratio ${b.p50Ratio} (target <= 1.5) ${passFail(b.p50Ratio <= 1.5)}`,
    );
  }
  for (const [k, why] of Object.entries(r.skipped)) lines.push(`${k}: skipped (${why})`);
  return lines.join('\n');
}

const passFail = (ok: boolean) => (ok ? 'PASS' : 'FAIL');

/** The breakdown as a table: phase, p50 ms, share of the call. */
export function formatPhases(rows: PhaseRow[]): string[] {
  const width = Math.max(...rows.map((r) => r.phase.length));
  return [
    `  ${'phase'.padEnd(width)}  p50 ms  share`,
    ...rows.map(
      (r) =>
        `  ${r.phase.padEnd(width)}  ${r.p50Ms.toFixed(1).padStart(6)}  ${
          r.share === null ? '    -' : `${Math.round(r.share * 100)}%`.padStart(5)
        }`,
    ),
  ];
}
