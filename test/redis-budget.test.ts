/**
 * Redis commands per call of each kind stay within a budget (issues 20 and 28). Counts come from
 * INFO commandstats (Lua scripts' own commands included) around N calls of one kind, minus what
 * the same processes send Redis in as long with no calls (heartbeats, sweeps, blocking pops).
 * Command counts are deterministic where times are not, so a change that adds a round trip to a
 * call fails here until its budget is raised on purpose, in review.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Type, defineTool } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

/**
 * Redis commands per call, at most. Each is the value measured when it was set (2-core machine,
 * calls one at a time, Redis 7.0) rounded up by ~10 %: raise one only with the reason in review.
 * Calls are BullMQ jobs (issue 28): the add, BullMQ's fetch (and the empty fetch its marker
 * causes after each job when calls come one at a time), its completion, and toolgate's two
 * scripts around them (admission, release) — ~50 of a call's commands, where toolgate's own
 * queue (the Lane, issue 20) took ~20. Here every call's record batch is its own (GAP_MS): the
 * most a call costs. docs/scaling.md has the split by family, and `pnpm bench` the counts under
 * load against raw BullMQ's in the same run.
 */
const BUDGET = {
  /**
   * POST /tools/calculator/execute, answered with the result. Measured 90.0–90.9 (43.2–43.5 on
   * the Lane; 96.4 before a completion that found the queue empty marked BullMQ's worker
   * drained and an end fetched the next call only while every slot was busy).
   */
  calculatorSync: 99,
  /** POST …?wait=false, then one GET /v1/calls/{id} once it has run. Measured 89.3. */
  calculatorAsync: 99,
  /** A synchronous calculator call with a fresh Idempotency-Key. Measured 90.7. */
  idempotent: 100,
  /**
   * A call answered from the result cache (the tool never runs, no job): its stats in a batch
   * of their own here (at concurrency 16 they share one: ~11 per hit). Measured 30.5–30.9.
   */
  cachedHit: 34,
  /** Parked by policy.approval, approved by an admin, run, then one GET. Measured 115.5–124.4. */
  approved: 130,
  /**
   * run_python in the docker sandbox, its stats in the worker's batch of a second (shared by
   * the ~6 calls of that second here, so the count moves with timing more than the others').
   * Measured 95.0 over 40 calls (45.1–47.5 on the Lane; 116.5–119.1 on BullMQ before issue 20).
   */
  runPython: 105,
} as const;
type Kind = keyof typeof BUDGET;

/** Calls per kind: enough that what idle traffic leaks through the subtraction is noise. */
const N = 50;
/**
 * run_python calls: ~0.1–0.5 s each, so fewer, yet enough seconds that how the worker's stats
 * batches of a second fall (see runPython) moves the count by little.
 */
const N_PYTHON = 40;
/**
 * A pause after each call, longer than the worker's record batch delay (10 ms): each call's
 * record, stats and series are written in a batch of their own. Under load a batch holds many
 * calls and their per-batch commands are shared; one call per batch is the most a call costs and,
 * unlike the sharing, does not depend on timing. (Both the batch's timer and this pause run on
 * this process's one event loop, in the order they are due, however loaded the machine.)
 */
const GAP_MS = 30;
/** A little over the worker's batch of sandbox calls' stats (SANDBOX_STATS_DELAY_MS, 1 s). */
const SANDBOX_STATS_MS = 1200;

/** Ours: cacheable like http_get (the one built-in with a result cache), without a network. */
const cachedLookup = defineTool({
  name: 'cached_lookup',
  description: 'A cacheable lookup',
  category: 'test',
  cacheTtlSeconds: 300,
  parameters: Type.Object({ q: Type.String() }),
  handler: ({ q }) => ({ q }),
});
/** Parked by policy.approval.tools (not by its risk), as an operator would configure it. */
const approvedCalc = defineTool({
  name: 'approved_calc',
  description: 'Adds two numbers, once someone approves',
  category: 'test',
  parameters: Type.Object({ a: Type.Number(), b: Type.Number() }),
  handler: ({ a, b }) => a + b,
});

const sandboxReason = await whyDriverUnavailable('docker');
if (sandboxReason) console.warn(`redis-budget: run_python skipped, ${sandboxReason}`);

let server: RedisServer;
let redis: Redis;
let stack: Stack;
let sandbox: Sandbox | undefined;
let dir: string | undefined;
let workerMetricsUrl: string;
const measured = new Map<Kind, Measurement>();

type Counts = Map<string, number>;

interface Measurement {
  perCall: number;
  families: [string, number][];
  /** The idle traffic taken out, per call. */
  idlePerCall: number;
}

/** Calls per command (lowercase), INFO's own left out: that is this file asking. */
async function commandCounts(): Promise<Counts> {
  const counts: Counts = new Map();
  for (const m of (await redis.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (m[1] !== 'info') counts.set(m[1]!, Number(m[2]));
  }
  return counts;
}

function delta(after: Counts, before: Counts): Counts {
  const d: Counts = new Map();
  for (const [name, n] of after) d.set(name, n - (before.get(name) ?? 0));
  return d;
}

/**
 * Commands per millisecond by family with no calls running, over `ms`. The lower of two
 * windows per family: a periodic job (a stalled-jobs check every 30 s) that fell in one window
 * would otherwise be charged to every call as if it were steady traffic.
 */
async function idleRate(ms = 1000): Promise<Counts> {
  const windows: Counts[] = [];
  for (let i = 0; i < 2; i++) {
    const before = await commandCounts();
    const t = performance.now();
    await sleep(ms);
    const d = delta(await commandCounts(), before);
    const took = performance.now() - t;
    windows.push(new Map([...d].map(([name, n]) => [name, n / took])));
  }
  const rate: Counts = new Map();
  for (const name of new Set([...windows[0]!.keys(), ...windows[1]!.keys()])) {
    rate.set(name, Math.min(windows[0]!.get(name) ?? 0, windows[1]!.get(name) ?? 0));
  }
  return rate;
}

/** The worker's count of finished executions (its own /metrics: no Redis involved). */
async function executions(tool: string): Promise<number> {
  const text = await (await fetch(workerMetricsUrl)).text();
  let total = 0;
  for (const m of text.matchAll(/^toolgate_tool_executions_total\{([^}]*)\} (\d+)/gm)) {
    if (m[1]!.includes(`tool="${tool}"`)) total += Number(m[2]);
  }
  return total;
}

/**
 * Resolves once the worker has finished `n` executions of `tool` (≤ 30 s): it counts them after
 * handing the record to its batch, so a GAP_MS later the record is in Redis.
 */
async function untilExecuted(tool: string, n: number): Promise<void> {
  const end = Date.now() + 30_000;
  while ((await executions(tool)) < n) {
    if (Date.now() > end) throw new Error(`${tool}: fewer than ${n} executions after 30 s`);
    await sleep(5);
  }
}

/** Runs `calls` and returns its Redis commands per call by family, idle traffic taken out. */
async function measure(kind: Kind, n: number, calls: () => Promise<void>): Promise<Measurement> {
  const idle = await idleRate();
  const before = await commandCounts();
  const t = performance.now();
  await calls();
  const took = performance.now() - t;
  const d = delta(await commandCounts(), before);
  const perFamily: [string, number][] = [...d]
    .map(([name, total]): [string, number] => [
      name,
      Math.max(0, total - (idle.get(name) ?? 0) * took) / n,
    ])
    .filter(([, perCall]) => perCall >= 0.05)
    .sort((a, b) => b[1] - a[1]);
  const idlePerCall = ([...idle.values()].reduce((sum, r) => sum + r, 0) * took) / n;
  const m = {
    perCall: perFamily.reduce((sum, [, v]) => sum + v, 0),
    families: perFamily,
    idlePerCall,
  };
  measured.set(kind, m);
  return m;
}

const show = (m: Measurement, top = 16) =>
  m.families
    .slice(0, top)
    .map(([name, v]) => `${name.toUpperCase()} ${v.toFixed(1)}`)
    .join(', ');

function expectWithinBudget(kind: Kind, m: Measurement): void {
  console.warn(
    `redis-budget ${kind}: ${m.perCall.toFixed(1)} commands per call (budget ${BUDGET[kind]}; idle traffic of ${m.idlePerCall.toFixed(1)} per call taken out): ${show(m)}`,
  );
  expect(
    m.perCall,
    `${kind}: ${m.perCall.toFixed(1)} Redis commands per call, over its budget of ${BUDGET[kind]}. Per family: ${show(m, 40)}`,
  ).toBeLessThanOrEqual(BUDGET[kind]);
}

async function json(res: Response): Promise<Record<string, unknown>> {
  return (await res.json()) as Record<string, unknown>;
}

beforeAll(async () => {
  // A private redis-server: other test files on the shared one would be counted with ours.
  server = await startRedisServer();
  redis = new Redis(server.port, '127.0.0.1');
  let services = {};
  if (!sandboxReason) {
    dir = mkdtempSync(join(tmpdir(), 'toolgate-budget-'));
    sandbox = await createSandbox(testSandboxConfig('docker', dir));
    await sandbox.warmUp(60_000);
    services = { sandbox, workspaces: createWorkspaces(sandbox.config) };
  }
  stack = await startStack({
    tools: [...testTools, cachedLookup, approvedCalc],
    services,
    config: {
      redis: { url: server.url, prefix: `budget${randomUUID().slice(0, 6)}` },
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 1_000_000 } },
        {
          id: 'ops',
          key: KEYS.admin,
          tools: ['*'],
          admin: true,
          rateLimit: { perMinute: 1_000_000 },
        },
      ],
      policy: { approval: { tools: ['approved_calc'] } },
    },
  });
  const port = await stack.worker!.serveMetrics(0);
  workerMetricsUrl = `http://127.0.0.1:${port}/metrics`;
  // Past the first calls' one-off work (scripts loaded, queues' keys created, JIT), for all kinds.
  for (let i = 0; i < 5; i++) {
    await stack.call('/tools/calculator/execute', { json: { expression: `${i}+1` } });
  }
}, 120_000);

afterAll(async () => {
  if (measured.size > 0) {
    console.warn(
      `redis-budget: commands per call — ${[...measured].map(([k, m]) => `${k} ${m.perCall.toFixed(1)}`).join(', ')}`,
    );
  }
  await stack?.close();
  await sandbox?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  redis?.disconnect();
  await server?.stop();
});

describe('Redis commands per call stay within their budgets', () => {
  it('calculator, answered synchronously', async () => {
    const m = await measure('calculatorSync', N, async () => {
      for (let i = 0; i < N; i++) {
        const res = await stack.call('/tools/calculator/execute', {
          json: { expression: `${i}*2` },
        });
        expect(await json(res)).toMatchObject({ status: 'ok', result: i * 2 });
        await sleep(GAP_MS);
      }
    });
    expectWithinBudget('calculatorSync', m);
  });

  it('calculator, ?wait=false and then GET /v1/calls/{id}', async () => {
    const done = await executions('calculator');
    const m = await measure('calculatorAsync', N, async () => {
      const ids: string[] = [];
      for (let i = 0; i < N; i++) {
        const res = await stack.call('/tools/calculator/execute?wait=false', {
          json: { expression: `${i}*3` },
        });
        expect(res.status).toBe(202);
        ids.push((await json(res)).id as string);
        await untilExecuted('calculator', done + i + 1);
        await sleep(GAP_MS);
      }
      for (const [i, id] of ids.entries()) {
        const call = await json(await stack.call(`/v1/calls/${id}`));
        expect(call).toMatchObject({ status: 'ok', result: i * 3 });
      }
    });
    expectWithinBudget('calculatorAsync', m);
  });

  it('calculator with an Idempotency-Key', async () => {
    const m = await measure('idempotent', N, async () => {
      for (let i = 0; i < N; i++) {
        const res = await stack.call('/tools/calculator/execute', {
          json: { expression: `${i}*5` },
          headers: { 'idempotency-key': `budget-${randomUUID()}` },
        });
        expect(await json(res)).toMatchObject({ status: 'ok', result: i * 5 });
        await sleep(GAP_MS);
      }
    });
    expectWithinBudget('idempotent', m);
  });

  it('a result-cache hit', async () => {
    const first = await stack.call('/tools/cached_lookup/execute', { json: { q: 'budget' } });
    expect(await json(first)).toMatchObject({ status: 'ok', cached: false });
    await sleep(GAP_MS);
    const m = await measure('cachedHit', N, async () => {
      for (let i = 0; i < N; i++) {
        const res = await stack.call('/tools/cached_lookup/execute', { json: { q: 'budget' } });
        expect(await json(res)).toMatchObject({ status: 'ok', cached: true });
        await sleep(GAP_MS);
      }
    });
    expectWithinBudget('cachedHit', m);
  });

  it('a call parked by policy.approval, approved, run and read', async () => {
    const done = await executions('approved_calc');
    const m = await measure('approved', N, async () => {
      const ids: string[] = [];
      for (let i = 0; i < N; i++) {
        const parked = await stack.call('/tools/approved_calc/execute', { json: { a: i, b: 1 } });
        expect(parked.status).toBe(202);
        const id = (await json(parked)).id as string;
        const approved = await stack.call(`/v1/approvals/${id}/approve`, {
          json: {},
          key: KEYS.admin,
        });
        expect(approved.status).toBe(200);
        ids.push(id);
        await untilExecuted('approved_calc', done + i + 1);
        await sleep(GAP_MS);
      }
      for (const [i, id] of ids.entries()) {
        const call = await json(await stack.call(`/v1/calls/${id}`));
        expect(call).toMatchObject({ status: 'ok', result: i + 1 });
      }
    });
    expectWithinBudget('approved', m);
  });

  it.skipIf(sandboxReason !== undefined)(
    'run_python in the docker sandbox',
    async () => {
      const m = await measure('runPython', N_PYTHON, async () => {
        for (let i = 0; i < N_PYTHON; i++) {
          const res = await stack.call('/tools/run_python/execute', {
            json: { code: `print(${i}*7)` },
          });
          expect(await json(res)).toMatchObject({
            status: 'ok',
            result: { stdout: `${i * 7}\n`, exitCode: 0 },
          });
          await sleep(GAP_MS);
        }
        // The worker counts sandbox calls' stats once a second: their last batch in the count.
        await sleep(SANDBOX_STATS_MS);
      });
      expectWithinBudget('runPython', m);
    },
    120_000,
  );
});
