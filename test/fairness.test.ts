import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CallStore, Dispatcher, Keys, createRedis } from '@toolgate/calls';
import { Type, defineTool } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './support/stack.js';

/**
 * Fair sharing of workers (docs/scheduling.md): one client's backlog never makes another wait
 * for more than one slot, calls in flight are capped per client, and a client runs at most
 * `limits.sandboxInFlight` sandbox calls at once.
 */

interface Run {
  client: string;
  label: string;
  start: number;
  end: number;
}
const runs: Run[] = [];

function sleeper(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      reject(new Error('aborted'));
    });
  });
}

const parameters = Type.Object({
  ms: Type.Integer({ minimum: 0, maximum: 10_000 }),
  label: Type.String(),
});
async function slowHandler(
  { ms, label }: { ms: number; label: string },
  ctx: { clientId: string; signal: AbortSignal },
) {
  const run: Run = { client: ctx.clientId, label, start: Date.now(), end: 0 };
  runs.push(run);
  await sleeper(ms, ctx.signal);
  run.end = Date.now();
  return { label };
}

// Queued like a container tool (sandbox queue, sandboxConcurrency slots) without a container:
// scheduling is what is under test, and a sleep has an exact duration.
const tools = [
  defineTool({
    name: 'slow_box',
    description: 'Sleeps in a sandbox slot',
    category: 'test',
    sandbox: { image: 'shell' },
    timeoutMs: 10_000,
    parameters,
    handler: slowHandler,
  }),
  defineTool({
    name: 'slow_fast',
    description: 'Sleeps in a fast-queue slot',
    category: 'test',
    timeoutMs: 10_000,
    parameters,
    handler: slowHandler,
  }),
];

const KEYS = {
  hog: 'hog-key-0123456789abcdef',
  meek: 'meek-key-0123456789abcdef',
  capped: 'capped-key-0123456789abcdef',
} as const;

const SLOT_MS = 500;
let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    tools,
    config: {
      // Two slots per queue, so a backlog of 16 takes 8 rounds.
      worker: { metricsPort: 0, concurrency: 2, sandboxConcurrency: 2 },
      clients: [
        { id: 'hog', key: KEYS.hog, limits: { queued: 40, sandboxInFlight: 4 } },
        { id: 'meek', key: KEYS.meek },
        { id: 'capped', key: KEYS.capped, limits: { queued: 3, sandboxInFlight: 1 } },
      ],
    },
  });
});
afterAll(() => stack?.close());

async function enqueue(key: string, tool: string, ms: number, label: string): Promise<string> {
  const res = await stack.call(`/tools/${tool}/execute?wait=false`, { key, json: { ms, label } });
  expect(res.status).toBe(202);
  return ((await res.json()) as { id: string }).id;
}

async function settled(key: string, id: string): Promise<{ status: string }> {
  for (let i = 0; i < 400; i++) {
    const res = await stack.call(`/v1/calls/${id}`, { key });
    const body = (await res.json()) as { status: string };
    if (body.status !== 'queued' && body.status !== 'running') return body;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`call ${id} did not finish`);
}

/** One client's backlog against another's single call, on the given queue. */
async function backlogAgainstOneCall(tool: string) {
  const from = runs.length;
  const backlog = await Promise.all(
    Array.from({ length: 16 }, (_, i) => enqueue(KEYS.hog, tool, SLOT_MS, `hog-${i}`)),
  );
  // Let the hog's calls take both slots, so the meek call really waits behind a backlog.
  await new Promise((r) => setTimeout(r, 100));
  const started = Date.now();
  const res = await stack.call(`/tools/${tool}/execute`, {
    key: KEYS.meek,
    json: { ms: 50, label: 'meek' },
  });
  const latency = Date.now() - started;
  expect(res.status).toBe(200);
  expect(await res.json()).toMatchObject({ status: 'ok', result: { label: 'meek' } });
  const hogDone = runs
    .slice(from)
    .filter((r) => r.client === 'hog' && r.end > 0 && r.end <= started + latency);
  // FIFO would make it wait for 8 rounds (~4 s); it waits for one slot to free up at most: at
  // most one round of the hog's calls ends first (the time bound leaves a loaded machine room).
  expect(hogDone.length).toBeLessThanOrEqual(4);
  expect(latency).toBeLessThan(4 * SLOT_MS);
  for (const id of backlog) expect(await settled(KEYS.hog, id)).toMatchObject({ status: 'ok' });
}

describe('fair scheduling across clients', () => {
  it('a client with one sandbox call waits for one slot, not behind another client’s backlog of 16', async () => {
    await backlogAgainstOneCall('slow_box');
  });

  it('the same on the fast queue', async () => {
    await backlogAgainstOneCall('slow_fast');
  });
});

describe('limits.queued', () => {
  it('refuses calls over the limit with 429 too_many_in_flight and Retry-After, and frees them when calls end', async () => {
    const ids = await Promise.all(
      [0, 1, 2].map((i) => enqueue(KEYS.capped, 'slow_box', 200, `queued-${i}`)),
    );
    const refused = await stack.call('/tools/slow_fast/execute', {
      key: KEYS.capped,
      json: { ms: 0, label: 'over' },
    });
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await refused.json()).toMatchObject({
      error: { code: 'too_many_in_flight', details: { limit: 3, inFlight: 3 } },
    });
    // Another client is not refused meanwhile.
    const other = await stack.call('/tools/slow_fast/execute', {
      key: KEYS.meek,
      json: { ms: 0, label: 'other' },
    });
    expect(other.status).toBe(200);

    for (const id of ids) expect(await settled(KEYS.capped, id)).toMatchObject({ status: 'ok' });
    const again = await stack.call('/tools/slow_fast/execute', {
      key: KEYS.capped,
      json: { ms: 0, label: 'again' },
    });
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ status: 'ok' });
  });

  it('the dialect bridge answers the whole request 429 too_many_in_flight', async () => {
    const ids = await Promise.all(
      [0, 1, 2].map((i) => enqueue(KEYS.capped, 'slow_box', 200, `bridge-${i}`)),
    );
    const res = await stack.call('/v1/tool-calls', {
      key: KEYS.capped,
      json: {
        tool_calls: [
          {
            id: 'call_fair_1',
            type: 'function',
            function: { name: 'slow_fast', arguments: '{"ms":0,"label":"bridge"}' },
          },
        ],
      },
    });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).not.toBeNull();
    expect(await res.json()).toMatchObject({ error: { code: 'too_many_in_flight' } });
    for (const id of ids) await settled(KEYS.capped, id);
  });
});

describe('limits.sandboxInFlight', () => {
  it('runs at most that many of a client’s sandbox calls at once, while others use the free slot', async () => {
    const from = runs.length;
    const ids = await Promise.all(
      [0, 1, 2].map((i) => enqueue(KEYS.capped, 'slow_box', 300, `capped-${i}`)),
    );
    await new Promise((r) => setTimeout(r, 50));
    const meek = await stack.call('/tools/slow_box/execute', {
      key: KEYS.meek,
      json: { ms: 300, label: 'meek-beside' },
    });
    expect(meek.status).toBe(200);
    // Put back in the queue is not "the worker died": every call ran, none worker_lost.
    for (const id of ids) expect(await settled(KEYS.capped, id)).toMatchObject({ status: 'ok' });

    const capped = runs
      .slice(from)
      .filter((r) => r.client === 'capped')
      .sort((a, b) => a.start - b.start);
    expect(capped).toHaveLength(3);
    for (let i = 1; i < capped.length; i++)
      expect(capped[i]!.start).toBeGreaterThanOrEqual(capped[i - 1]!.end);
    // The meek call ran beside one of capped's (two slots, capped holds one).
    const meekRun = runs.slice(from).find((r) => r.label === 'meek-beside')!;
    expect(capped.some((r) => r.start < meekRun.end && meekRun.start < r.end)).toBe(true);

    const metrics = await fetch(`http://127.0.0.1:${await stack.worker!.serveMetrics(0)}/metrics`);
    expect(await metrics.text()).toMatch(
      /toolgate_fair_deferrals_total\{[^}]*client="capped"[^}]*\} [1-9]/,
    );
  });
});

// The same through real containers: run_shell `sleep` as the long call, file_list as the short one.
const dockerMissing = await whyDriverUnavailable('docker');
describe.skipIf(dockerMissing !== undefined)('fair scheduling with real sandboxes (docker)', () => {
  let real: Stack;
  let sandbox: Sandbox;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'toolgate-fair-'));
    sandbox = await createSandbox(testSandboxConfig('docker', dir));
    await sandbox.warmUp(60_000);
    real = await startStack({
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
      config: {
        worker: { metricsPort: 0, sandboxConcurrency: 2 },
        clients: [
          { id: 'hog', key: KEYS.hog, limits: { queued: 40, sandboxInFlight: 4 } },
          { id: 'meek', key: KEYS.meek },
        ],
      },
    });
  }, 120_000);
  afterAll(async () => {
    await real?.close();
    await sandbox?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('file_list of one client runs after one of another client’s 8 queued `sleep 1` calls, not all of them', async () => {
    const backlog = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const res = await real.call('/tools/run_shell/execute?wait=false', {
          key: KEYS.hog,
          json: { command: 'sleep 1' },
        });
        expect(res.status).toBe(202);
        return ((await res.json()) as { id: string }).id;
      }),
    );
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    const res = await real.call('/tools/file_list/execute', { key: KEYS.meek, json: {} });
    const latency = Date.now() - started;
    expect(await res.json()).toMatchObject({ status: 'ok' });
    // FIFO: 4 rounds of 1 s on two slots before it; fair: one slot frees within ~1 s.
    expect(latency).toBeLessThan(2500);
    const done = await Promise.all(
      backlog.map(async (id) => {
        const r = await real.call(`/v1/calls/${id}`, { key: KEYS.hog });
        return ((await r.json()) as { status: string }).status;
      }),
    );
    expect(done.filter((s) => s === 'ok').length).toBeLessThan(8);
  }, 60_000);
});

// The defaults (limits.sandboxInFlight 4, worker.sandboxConcurrency 4, sandboxReserve 1), as the
// quickstart and the compose stack run them: the cap equals the slots, so without headroom one
// client holds every slot and another waits for one of its long calls to end.
describe('headroom with the default config', () => {
  let defaults: Stack;
  beforeAll(async () => {
    defaults = await startStack({
      tools,
      config: {
        clients: [
          { id: 'hog', key: KEYS.hog },
          { id: 'meek', key: KEYS.meek },
        ],
      },
    });
  });
  afterAll(() => defaults?.close());

  /** The sandbox queue's job counts, read the way the gateway reads them for its gauges. */
  async function queueCounts() {
    const redis = createRedis(defaults.config.redis, 'command');
    const subscriber = createRedis(defaults.config.redis, 'blocking');
    const keys = Keys.for(defaults.config.redis);
    const dispatcher = new Dispatcher(
      redis,
      subscriber,
      keys,
      new CallStore(redis, keys, 60, 1024),
    );
    try {
      const c = await dispatcher.counts('sandbox');
      return { waiting: c.waiting, delayed: c.delayed };
    } finally {
      await dispatcher.close();
      redis.disconnect();
    }
  }

  const start = async (ms: number, label: string) => {
    const res = await defaults.call('/tools/slow_box/execute?wait=false', {
      key: KEYS.hog,
      json: { ms, label },
    });
    expect(res.status).toBe(202);
    return ((await res.json()) as { id: string }).id;
  };
  const statusOf = async (id: string) =>
    (
      (await (await defaults.call(`/v1/calls/${id}`, { key: KEYS.hog })).json()) as {
        status: string;
      }
    ).status;
  /** Most of `rs` running at one instant. */
  const mostAtOnce = (rs: Run[]) =>
    Math.max(...rs.map((r) => rs.filter((o) => o.start <= r.start && r.start < o.end).length));

  it('a client alone uses every slot, and its backlog follows each ended call at once', async () => {
    const from = runs.length;
    const ids = await Promise.all(Array.from({ length: 8 }, (_, i) => start(2000, `alone-${i}`)));
    for (const id of ids) {
      for (let i = 0; i < 200 && ['queued', 'running'].includes(await statusOf(id)); i++)
        await new Promise((r) => setTimeout(r, 50));
      expect(await statusOf(id)).toBe('ok');
    }
    const hog = runs.slice(from).sort((a, b) => a.start - b.start);
    expect(hog).toHaveLength(8);
    // All four slots, never the reserve: that is for a client with nothing running.
    expect(mostAtOnce(hog)).toBe(4);
    // Work-conserving: each of the second four starts as one of the first four ends (the
    // backlog waits in the queue), not when a put-back delay (up to 4 s) happens to end.
    const ends = hog
      .slice(0, 4)
      .map((r) => r.end)
      .sort((a, b) => a - b);
    const gaps = hog.slice(4).map((r, i) => r.start - ends[i]!);
    console.warn(`headroom: slot freed → the hog's next call started in ${gaps.join(', ')} ms`);
    for (const gap of gaps) expect(gap).toBeLessThan(500);
  }, 30_000);

  it('another client’s sandbox call starts while the first holds every slot with long calls', async () => {
    const from = runs.length;
    const ids = await Promise.all(Array.from({ length: 16 }, (_, i) => start(4000, `long-${i}`)));
    // Wait until the hog runs four at once: every normal slot is its.
    const running = () => runs.slice(from).filter((r) => r.client === 'hog' && r.end === 0);
    for (let i = 0; i < 100 && running().length < 4; i++)
      await new Promise((r) => setTimeout(r, 50));
    const holding = running();
    expect(holding).toHaveLength(4);
    // The rest of the backlog waits in the queue, counted as waiting (what autoscaling reads),
    // not put back as delayed; only the call the reserve slot last handed back is out of the
    // count, for 100 ms.
    const counts = await queueCounts();
    expect(counts.waiting).toBeGreaterThanOrEqual(10);
    expect(counts.delayed).toBeLessThanOrEqual(1);

    const asked = Date.now();
    const res = await defaults.call('/tools/slow_box/execute', {
      key: KEYS.meek,
      json: { ms: 50, label: 'meek-headroom' },
    });
    const latency = Date.now() - asked;
    expect(await res.json()).toMatchObject({ status: 'ok', result: { label: 'meek-headroom' } });
    const meek = runs.slice(from).find((r) => r.label === 'meek-headroom')!;
    // It ran beside the hog's four, before any of them ended (before: ~4 s, a whole call).
    expect(holding.every((r) => r.end === 0 || meek.start < r.end)).toBe(true);
    console.warn(`headroom: meek's 50 ms call answered in ${latency} ms beside the hog's four`);
    expect(latency).toBeLessThan(2000);

    for (const id of ids)
      await defaults.call(`/v1/calls/${id}/cancel`, { key: KEYS.hog, method: 'POST' });
    for (const id of ids) {
      for (let i = 0; i < 200 && ['queued', 'running'].includes(await statusOf(id)); i++)
        await new Promise((r) => setTimeout(r, 50));
    }
    // The hog never ran more than its four, headroom or not.
    expect(mostAtOnce(runs.slice(from).filter((r) => r.client === 'hog'))).toBeLessThanOrEqual(4);
  }, 60_000);
});
