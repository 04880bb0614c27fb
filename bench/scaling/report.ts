// The scaling benchmark's table (markdown, ready for docs/scaling.md) and its reading: the
// curve against 1 gateway × 1 worker, where it bends, and the single-Redis-master ceiling.

export interface StepResult {
  gateways: number;
  workers: number;
  tool: string;
  seconds: number;
  calls: number;
  failed: number;
  p50Ms: number;
  p95Ms: number;
  /** CPU per completed call, ms. */
  redisMs: number;
  /** Redis commands run per call, the costliest first (INFO commandstats). */
  redisCommands: { name: string; perCall: number; usecPerCall: number }[];
  /** Redis CPU with the same processes and no calls, ms per second. */
  redisIdleMsPerS: number;
  gatewayMs: number;
  workerMs: number;
  sandboxMs: number;
  loadGenMs: number;
  /**
   * The whole machine's busy CPU per call, ms: the processes above, CPU that reached none of
   * their counters (short-lived sandbox processes, kernel work) and anything else running.
   */
  machineMs: number;
  /** Share of the machine's CPU in use during the step (every process on it). */
  machineBusy: number;
  /** The part of it this run's processes used (Redis, gateways, workers, sandboxes, load gen). */
  ownShare: number;
}

export const callsPerSecond = (r: StepResult) => r.calls / r.seconds;

function baseline(results: StepResult[], tool: string): StepResult | undefined {
  return results.find((r) => r.tool === tool && r.gateways === 1 && r.workers === 1);
}

export function table(results: StepResult[]): string[] {
  const header = [
    'gateways × workers',
    'tool',
    'calls/s',
    'p50 ms',
    'p95 ms',
    'Redis µs/call',
    'Redis idle ms/s',
    'gateway ms/call',
    'worker ms/call',
    'sandbox ms/call',
    'load gen ms/call',
    'machine ms/call',
    'machine busy',
    'of it these processes',
    'vs 1 × 1',
    'failed',
  ];
  const rows = results.map((r) => {
    const base = baseline(results, r.tool);
    return [
      `${r.gateways} × ${r.workers}`,
      r.tool,
      callsPerSecond(r).toFixed(0),
      r.p50Ms.toFixed(1),
      r.p95Ms.toFixed(1),
      (r.redisMs * 1000).toFixed(0),
      r.redisIdleMsPerS.toFixed(1),
      r.gatewayMs.toFixed(2),
      r.workerMs.toFixed(2),
      r.tool === 'calculator' ? '–' : r.sandboxMs.toFixed(2),
      r.loadGenMs.toFixed(2),
      r.machineMs.toFixed(2),
      `${(r.machineBusy * 100).toFixed(0)} %`,
      `${(r.ownShare * 100).toFixed(0)} %`,
      base ? (callsPerSecond(r) / callsPerSecond(base)).toFixed(2) : '–',
      String(r.failed),
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  return [
    line(header),
    `| ${widths.map((w, i) => (i < 2 ? '-'.repeat(w) : `${'-'.repeat(w - 1)}:`)).join(' | ')} |`,
    ...rows.map(line),
  ];
}

/**
 * Per tool: calls/s as the worker count doubles behind one gateway, the first doubling that
 * gains less than 1.5× (the bend), and what the machine's CPU was doing there.
 */
export function curve(results: StepResult[], tool: string, cores: number): string {
  const series = results
    .filter((r) => r.tool === tool && r.gateways === 1)
    .sort((a, b) => a.workers - b.workers);
  if (series.length < 2) return `${tool}: one worker count only, no curve`;
  const steps = series.map((r) => `${r.workers} w ${callsPerSecond(r).toFixed(0)}/s`).join(' → ');
  let bend: string | undefined;
  for (let i = 1; i < series.length; i++) {
    const [a, b] = [series[i - 1]!, series[i]!];
    const gain = callsPerSecond(b) / callsPerSecond(a);
    const linear = b.workers / a.workers;
    if (gain - 1 < 0.5 * (linear - 1)) {
      bend =
        `bends at ${a.workers} → ${b.workers} workers (×${gain.toFixed(2)} where ×${linear} would be linear; ` +
        `machine ${(a.machineBusy * 100).toFixed(0)} % → ${(b.machineBusy * 100).toFixed(0)} % busy on ${cores} cores)`;
      break;
    }
  }
  return `${tool}: ${steps}; ${bend ?? 'no bend in this range'}`;
}

/**
 * Which Redis commands a call costs, at the step with the most calls/s. commandstats counts the
 * commands Lua scripts run as well (inside EVALSHA's time too), and its times are wall-clock:
 * so counts are shown, and the scripts' share of the time as a lower bound.
 */
export function commands(results: StepResult[], tool: string): string {
  const best = results
    .filter((r) => r.tool === tool && r.calls > 0)
    .sort((a, b) => callsPerSecond(b) - callsPerSecond(a))[0];
  if (!best) return `${tool}: no calls`;
  const list = best.redisCommands.filter((c) => c.name !== 'info'); // the bench's own
  const total = list.reduce((sum, c) => sum + c.perCall, 0);
  const usec = list.reduce((sum, c) => sum + c.usecPerCall, 0);
  const scripts = list.find((c) => c.name === 'evalsha');
  const frequent = list
    .filter((c) => c.name !== 'evalsha')
    .sort((a, b) => b.perCall - a.perCall)
    .slice(0, 8)
    .map((c) => `${c.name} ${c.perCall.toFixed(1)}`);
  return (
    `${tool} at ${best.gateways} × ${best.workers}: ${total.toFixed(0)} Redis commands per call, those Lua scripts run included; ` +
    `${(scripts?.perCall ?? 0).toFixed(1)} EVALSHA taking ≥ ${((100 * (scripts?.usecPerCall ?? 0)) / usec).toFixed(0)} % of the command time; ` +
    `the most frequent: ${frequent.join(', ')}`
  );
}

/** Redis CPU per call net of what the same processes cost Redis without calls, ms. */
export function redisPerCallNet(r: StepResult): number {
  return r.redisMs - r.redisIdleMsPerS / callsPerSecond(r);
}

/**
 * One Redis core ÷ Redis CPU per call (net of the idle cost), at the step with the most calls/s:
 * what one master (one prefix, one hash slot in a Cluster) can carry.
 */
export function redisCeiling(results: StepResult[], tool: string): string {
  const best = results
    .filter((r) => r.tool === tool && r.calls > 0)
    .sort((a, b) => callsPerSecond(b) - callsPerSecond(a))[0];
  if (!best) return `${tool}: no calls`;
  const net = redisPerCallNet(best);
  return (
    `${tool}: ${(best.redisMs * 1000).toFixed(0)} µs of Redis CPU per call at ${callsPerSecond(best).toFixed(0)} calls/s, ` +
    `${(net * 1000).toFixed(0)} µs net of the ${best.redisIdleMsPerS.toFixed(1)} ms/s idle cost ` +
    `→ one Redis core (one master) saturates near ${((1000 - best.redisIdleMsPerS) / net).toFixed(0)} calls/s`
  );
}
