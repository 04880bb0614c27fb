// Issue 21's benchmark (docs/upstreams.md, "Measured"): an upstream MCP tool through toolgate
// against the same call made directly by the official SDK client, in one run, and how fast a
// cancel reaches the upstream.
//
// - server-everything's `echo` (its Streamable HTTP mode on 127.0.0.1): through toolgate
//   (HTTP POST /tools/everything__echo/execute → gateway → fast queue → worker → the worker's
//   SDK client) vs one SDK client in this process calling the upstream itself, at concurrency
//   1, 16 and 64; and, to tell the upstream path's own cost from the gateway's and the queue's,
//   the worker's client code (UpstreamConnection) in this process. The sides alternate within
//   each round (and swap order each round), so a slow stretch of the shared machine weighs on
//   all alike. CPU per call per process from /proc.
// - A 10 s call to a slow upstream of our own, made with ?wait=false and then cancelled with
//   POST /v1/calls/{id}/cancel: the time from the cancel request to the upstream seeing it.
//
// - The stdio transport (stdioPhase): server-everything's `echo` over stdio, through toolgate
//   (the worker runs `npm:` server-everything in a sandbox, docs/upstreams.md) vs the SDK's own
//   StdioClientTransport spawning the same server on the host, in this process.
//
// Results on stdout, progress on stderr. Env: BENCH_SECONDS (per measurement, default 2),
// BENCH_ROUNDS (3), BENCH_WARMUP_SECONDS (2), BENCH_CANCEL_RUNS (10),
// BENCH_CONCURRENCIES (1,16,64), BENCH_UPSTREAM_CONCURRENCY (the upstream's `concurrency`;
// the config's default when unset), BENCH_STDIO_DRIVER (bwrap, docker, or off: no stdio rows),
// BENCH_WORKER_NODE_OPTIONS and BENCH_GATEWAY_NODE_OPTIONS (NODE_OPTIONS for the HTTP phase's
// worker and gateway, e.g. `--cpu-prof`).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { parseConfig } from '@toolgate/config';
import { createGuardedFetch } from '@toolgate/tools';
import { UpstreamConnection } from '@toolgate/upstreams';
import autocannon from 'autocannon';
import {
  benchRedis,
  benchRedisPid,
  cpuMs,
  freePort,
  percentile,
  ROOT,
  startTs,
  stop,
} from './lib.js';
import { startSlowUpstream } from './upstreams/slow-upstream.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const warmUpSeconds = Number(process.env.BENCH_WARMUP_SECONDS ?? 2);
const cancelRuns = Number(process.env.BENCH_CANCEL_RUNS ?? 10);
const concurrencies = (process.env.BENCH_CONCURRENCIES ?? '1,16,64').split(',').map(Number);
const upstreamConcurrency = process.env.BENCH_UPSTREAM_CONCURRENCY;
const SLOW_MS = 10_000;
const MESSAGE = 'bench';

const progress = (line: string) => process.stderr.write(`${line}\n`);

// --- the upstreams --------------------------------------------------------------------------

/** server-everything in its Streamable HTTP mode, bound to loopback by the tests' preload. */
async function startEverything(): Promise<{ url: string; child: ChildProcess }> {
  const require = createRequire(import.meta.url);
  const entry = require.resolve('@modelcontextprotocol/server-everything/dist/index.js');
  const loopback = join(ROOT, 'test/fixtures/upstreams/loopback.mjs');
  const port = await freePort();
  // Its per-request console.log goes to stdout: ignored, so an unread pipe never blocks it.
  const child = spawn(process.execPath, ['--import', loopback, entry, 'streamableHttp'], {
    env: { PATH: process.env.PATH ?? '', PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  process.on('exit', () => child.kill('SIGKILL'));
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (/listening on port/i.test(output)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`server-everything exited ${code}: ${output}`)));
  });
  return { url: `http://127.0.0.1:${port}/mcp`, child };
}

const redisUrl = await benchRedis();
const everything = await startEverything();
const slow = await startSlowUpstream();

// --- toolgate -------------------------------------------------------------------------------

const key = 'bench-key-0123456789abcdef';
const config = join(mkdtempSync(join(tmpdir(), 'toolgate-bench-')), 'toolgate.yaml');
const concurrencyLine =
  upstreamConcurrency === undefined ? '' : `, concurrency: ${Number(upstreamConcurrency)}`;
writeFileSync(
  config,
  [
    'policy: { http: { allowHosts: [127.0.0.1] } }',
    'clients:',
    `  - id: bench`,
    `    key: ${key}`,
    '    rateLimit: { perMinute: 100000000 }',
    'upstreams:',
    `  - { id: everything, url: '${everything.url}', trust: auto${concurrencyLine} }`,
    `  - { id: slow, url: '${slow.url}', trust: auto, timeoutMs: 60000 }`,
    'log: { level: warn }',
    '',
  ].join('\n'),
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
  // Upstream calls run on the fast queue: no sandbox driver or warm containers beside them.
  TOOLGATE_WORKER_QUEUES: 'fast',
};
const worker = await startTs(
  'services/worker/src/main.ts',
  { ...env, NODE_OPTIONS: process.env.BENCH_WORKER_NODE_OPTIONS ?? '' },
  /worker started/,
);
const gateway = await startTs(
  'services/gateway/src/main.ts',
  { ...env, NODE_OPTIONS: process.env.BENCH_GATEWAY_NODE_OPTIONS ?? '' },
  /gateway listening/,
);
const base = `http://127.0.0.1:${port}`;
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
progress(
  `toolgate upstream benchmark — Redis ${redisUrl}; server-everything at ${everything.url}; ${rounds} rounds of ${seconds} s per side at concurrency ${concurrencies.join(', ')}`,
);

// --- the two sides --------------------------------------------------------------------------

interface Side {
  label: string;
  /** Processes whose CPU time is charged to this side (the bench process included). */
  pids: Record<string, number | undefined>;
  /** Latencies (ms) of every call `c` callers completed in `s` seconds. */
  load(c: number, s: number): Promise<number[]>;
  /** Waits until calls a load left behind are done. */
  settle?(): Promise<void>;
}

const direct = new Client({ name: 'bench-direct', version: '0.1.0' }, { capabilities: {} });
await direct.connect(new StreamableHTTPClientTransport(new URL(everything.url)));
const directCall = async () => {
  const result = await direct.callTool({ name: 'echo', arguments: { message: MESSAGE } });
  const text = (result.content as { type: string; text?: string }[])[0]?.text;
  if (result.isError || text !== `Echo: ${MESSAGE}`)
    throw new Error(`direct: unexpected ${JSON.stringify(result)}`);
};
const directSide: Side = {
  label: 'direct SDK client',
  pids: { bench: process.pid, upstream: everything.child.pid },
  async load(c, s) {
    const times: number[] = [];
    const until = performance.now() + s * 1000;
    await Promise.all(
      Array.from({ length: c }, async () => {
        while (performance.now() < until) {
          const t = performance.now();
          await directCall();
          times.push(performance.now() - t);
        }
      }),
    );
    return times;
  },
};

// The worker's own client code (packages/upstreams: the SSRF-guarded fetch, the response cap,
// the per-call deadline and signals) on the same SDK client, in this process, without the
// gateway and the queue: what it costs beyond `direct` is the upstream path's own share.
const workerConfig = parseConfig({
  policy: { http: { allowHosts: ['127.0.0.1'] } },
  upstreams: [{ id: 'everything', url: everything.url, trust: 'auto', concurrency: 1024 }],
});
const guardedFetch = createGuardedFetch(workerConfig.policy.http);
const connection = new UpstreamConnection(workerConfig.upstreams[0]!, guardedFetch);
let connectionCalls = 0;
const connectionCall = async () => {
  const result = await connection.call('echo', { message: MESSAGE }, `bench-${connectionCalls++}`, {
    signal: new AbortController().signal,
  });
  const text = (result.content as { type: string; text?: string }[])[0]?.text;
  if (result.isError || text !== `Echo: ${MESSAGE}`)
    throw new Error(`worker client: unexpected ${JSON.stringify(result)}`);
};
const connectionSide: Side = {
  label: 'worker client alone',
  pids: { bench: process.pid, upstream: everything.child.pid },
  async load(c, s) {
    const times: number[] = [];
    const until = performance.now() + s * 1000;
    await Promise.all(
      Array.from({ length: c }, async () => {
        while (performance.now() < until) {
          const t = performance.now();
          await connectionCall();
          times.push(performance.now() - t);
        }
      }),
    );
    return times;
  },
};

const toolgateSide: Side = {
  label: 'through toolgate',
  pids: {
    bench: process.pid,
    gateway: gateway.pid,
    worker: worker.pid,
    redis: benchRedisPid,
    upstream: everything.child.pid,
  },
  async load(c, s) {
    const times: number[] = [];
    const wrong: string[] = [];
    // Without a callback it is both the run (an EventEmitter) and its result's promise.
    const run = autocannon({
      url: `${base}/tools/everything__echo/execute`,
      method: 'POST',
      headers,
      body: JSON.stringify({ message: MESSAGE }),
      connections: c,
      duration: s,
      // Every answer is checked: a wrong one counts as a mismatch and fails the run.
      verifyBody: (body) => {
        const text = String(body);
        const ok = text.includes('"status":"ok"') && text.includes(`"result":"Echo: ${MESSAGE}"`);
        if (!ok && wrong.length < 3) wrong.push(text.slice(0, 400));
        return ok;
      },
    }) as unknown as autocannon.Instance & Promise<autocannon.Result>;
    run.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) =>
      times.push(ms),
    );
    const result = await run;
    const failed = result.errors + result.timeouts + result.non2xx + result.mismatches;
    if (failed > 0) {
      throw new Error(
        `toolgate: ${failed} failed calls (errors ${result.errors}, timeouts ${result.timeouts}, non-2xx ${result.non2xx}, wrong answers ${result.mismatches}); the first: ${wrong.join(' | ')}`,
      );
    }
    return times;
  },
  // Not timed: the calls autocannon left in toolgate finish before anything else runs.
  settle,
};

/**
 * One call through toolgate, retried while the client is at its in-flight limit. autocannon
 * stops at the end of its duration with calls still queued or running in toolgate; this
 * waits them out (the fast lane takes calls in order), so they neither weigh on the next
 * side's measurement nor refuse the cancel phase's calls.
 */
async function settle(): Promise<void> {
  for (;;) {
    const answer = await fetch(`${base}/tools/everything__echo/execute`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ message: MESSAGE }),
    });
    if (answer.status === 200) return void (await answer.arrayBuffer());
    if (answer.status !== 429) throw new Error(`toolgate: ${answer.status} ${await answer.text()}`);
    await answer.arrayBuffer();
    await new Promise((r) => setTimeout(r, 50));
  }
}

// One call each way first: the worker's client connects on its first call, not in a round.
await directCall();
await connectionCall();
await settle();

const sides = [directSide, connectionSide, toolgateSide];
progress(`warm-up: ${warmUpSeconds} s per side at concurrency 16`);
for (const side of sides) {
  await side.load(16, warmUpSeconds);
  await side.settle?.();
}

interface Tally {
  times: number[];
  calls: number;
  seconds: number;
  cpu: Record<string, number>;
}
const tallies = new Map<string, Tally>();
const tally = (side: Side, c: number): Tally => {
  const k = `${side.label}@${c}`;
  let t = tallies.get(k);
  if (!t) tallies.set(k, (t = { times: [], calls: 0, seconds: 0, cpu: {} }));
  return t;
};
for (let round = 1; round <= rounds; round++) {
  for (const c of concurrencies) {
    const order = round % 2 === 1 ? sides : [...sides].reverse();
    const line: string[] = [];
    for (const side of order) {
      const before = Object.fromEntries(Object.entries(side.pids).map(([k, p]) => [k, cpuMs(p)]));
      const t = performance.now();
      const times = await side.load(c, seconds);
      const elapsed = (performance.now() - t) / 1000;
      const total = tally(side, c);
      for (const [name, pid] of Object.entries(side.pids)) {
        const [a, b] = [before[name], cpuMs(pid)];
        if (a !== undefined && b !== undefined) total.cpu[name] = (total.cpu[name] ?? 0) + b - a;
      }
      await side.settle?.();
      total.times.push(...times);
      total.calls += times.length;
      total.seconds += elapsed;
      times.sort((x, y) => x - y);
      line.push(
        `${side.label}: ${(times.length / elapsed).toFixed(0)} calls/s, p50 ${percentile(times, 50).toFixed(2)} ms`,
      );
    }
    progress(`  round ${round}/${rounds} c=${c}  ${line.join('  |  ')}`);
  }
}

// --- cancel ---------------------------------------------------------------------------------

progress(`cancel: ${cancelRuns} calls of ${SLOW_MS / 1000} s, each cancelled once running`);
const cancelTimes: number[] = [];
const cancelAnswered: number[] = [];
for (let i = 0; i < cancelRuns; i++) {
  const tag = `cancel-${i}`;
  const started = await fetch(`${base}/tools/slow__slow/execute?wait=false`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ tag, ms: SLOW_MS }),
  });
  if (started.status !== 202) throw new Error(`slow: ${started.status} ${await started.text()}`);
  const { id } = (await started.json()) as { id: string };
  await slow.started(tag);
  const t0 = performance.now();
  const cancel = await fetch(`${base}/v1/calls/${id}/cancel`, { method: 'POST', headers });
  cancelAnswered.push(performance.now() - t0);
  if (cancel.status !== 200) throw new Error(`cancel: ${cancel.status} ${await cancel.text()}`);
  const seen = await Promise.race([
    slow.cancelled(tag),
    new Promise<never>((_, reject) =>
      setTimeout(
        () => reject(new Error(`the cancel of ${tag} never reached the upstream`)),
        15_000,
      ),
    ),
  ]);
  cancelTimes.push(seen - t0);
}

await stop(gateway);
await stop(worker);
await direct.close();
await connection.close();
await guardedFetch.close();
await slow.close();
everything.child.kill();

// --- report ---------------------------------------------------------------------------------

const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
const summary = (side: Side, c: number) => {
  const t = tally(side, c);
  const sorted = [...t.times].sort((a, b) => a - b);
  const cpuTotal = Object.values(t.cpu).reduce((a, b) => a + b, 0);
  return {
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    rate: t.calls / t.seconds,
    cpu: Object.entries(t.cpu).map(([k, ms]) => `${k} ${((ms * 1000) / t.calls).toFixed(0)}`),
    cpuTotalUs: (cpuTotal * 1000) / t.calls,
  };
};
console.log('server-everything echo over Streamable HTTP, through toolgate vs direct SDK client');
for (const c of concurrencies) {
  const [d, w, g] = [summary(directSide, c), summary(connectionSide, c), summary(toolgateSide, c)];
  console.log(`  concurrency ${c}`);
  for (const [side, s] of [
    [directSide, d],
    [connectionSide, w],
    [toolgateSide, g],
  ] as const) {
    console.log(
      `    ${side.label.padEnd(20)} p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  ${s.rate.toFixed(0)} calls/s   CPU per call (µs): ${s.cpu.join(', ')}; total ${s.cpuTotalUs.toFixed(0)}`,
    );
  }
  console.log(
    `    toolgate / direct: p50 ${(g.p50 / d.p50).toFixed(2)}× (+${(g.p50 - d.p50).toFixed(2)} ms), throughput ${(g.rate / d.rate).toFixed(2)}×; worker client alone / direct: p50 +${(w.p50 - d.p50).toFixed(2)} ms, CPU per call +${(w.cpuTotalUs - d.cpuTotalUs).toFixed(0)} µs`,
  );
}
cancelTimes.sort((a, b) => a - b);
cancelAnswered.sort((a, b) => a - b);
console.log(
  `cancel of a ${SLOW_MS / 1000} s upstream call (${cancelRuns} runs): cancel request → upstream sees it p50 ${percentile(cancelTimes, 50).toFixed(1)} ms, p95 ${percentile(cancelTimes, 95).toFixed(1)} ms, max ${cancelTimes.at(-1)!.toFixed(1)} ms; the cancel's HTTP answer p50 ${percentile(cancelAnswered, 50).toFixed(1)} ms`,
);

console.log('');
const c1 = concurrencies.includes(1)
  ? [summary(directSide, 1), summary(toolgateSide, 1)]
  : undefined;
const c64 = concurrencies.includes(64)
  ? [summary(directSide, 64), summary(toolgateSide, 64)]
  : undefined;
if (c1) {
  const overhead = c1[1]!.p50 - c1[0]!.p50;
  console.log(
    `p50 overhead over direct at c=1:   ${overhead.toFixed(2)} ms   target ≤ 2 ms   ${verdict(overhead <= 2)}`,
  );
}
if (c64) {
  const ratio = c64[1]!.rate / c64[0]!.rate;
  console.log(
    `throughput vs direct at c=64:      ${ratio.toFixed(2)}×     target ≥ 0.7×   ${verdict(ratio >= 0.7)}`,
  );
}
const cancelP95 = percentile(cancelTimes, 95);
console.log(
  `cancel reaches the upstream (p95): ${cancelP95.toFixed(1)} ms   target ≤ 100 ms ${verdict(cancelP95 <= 100)}`,
);
await stdioPhase();
process.exit(0);

// --- the stdio transport ----------------------------------------------------------------------

/**
 * server-everything's `echo` over stdio: through toolgate (a gateway and a worker of their own,
 * the server `npm:`-installed in the node image, in a sandbox of the worker's) vs the SDK
 * client spawning the same server (the host's copy, same version) itself. Same rounds and
 * concurrencies as above; CPU per call per process from /proc (the sandboxed server's is not
 * a child of anything here: left out of both sides).
 */
async function stdioPhase(): Promise<void> {
  const driver = process.env.BENCH_STDIO_DRIVER ?? 'bwrap';
  if (driver === 'off') return;
  const require = createRequire(import.meta.url);
  const entry = require.resolve('@modelcontextprotocol/server-everything/dist/index.js');
  const version = (
    require('@modelcontextprotocol/server-everything/package.json') as { version: string }
  ).version;
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-bench-stdio-'));
  const file = join(dir, 'toolgate.yaml');
  writeFileSync(
    file,
    [
      'clients:',
      `  - id: bench`,
      `    key: ${key}`,
      '    rateLimit: { perMinute: 100000000 }',
      'sandbox:',
      `  driver: ${driver}`,
      `  workspacesRoot: ${join(dir, 'workspaces')}`,
      `  stateDir: ${join(dir, 'state')}`,
      '  workspaceQuota: off',
      '  pool: { size: 0 }',
      'upstreams:',
      `  - { id: everything, npm: '@modelcontextprotocol/server-everything@${version}', args: [stdio], trust: auto, start: eager${concurrencyLine} }`,
      'log: { level: warn }',
      '',
    ].join('\n'),
  );
  const stdioPort = await freePort();
  const stdioEnv = {
    ...env,
    TOOLGATE_CONFIG: file,
    PORT: String(stdioPort),
    TOOLGATE_REDIS_PREFIX: 'bench-stdio',
    TOOLGATE_WORKER_QUEUES: 'fast,sandbox',
  };
  const stdioWorker = await startTs('services/worker/src/main.ts', stdioEnv, /worker started/);
  const stdioGateway = await startTs('services/gateway/src/main.ts', stdioEnv, /gateway listening/);
  const stdioBase = `http://127.0.0.1:${stdioPort}`;
  progress(`stdio: server-everything ${version} in a ${driver} sandbox vs spawned by the SDK`);

  const host = new Client({ name: 'bench-direct-stdio', version: '0.1.0' }, { capabilities: {} });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [entry, 'stdio'],
    env: { PATH: process.env.PATH ?? '' },
    stderr: 'ignore',
  });
  await host.connect(transport);
  const hostCall = async () => {
    const result = await host.callTool({ name: 'echo', arguments: { message: MESSAGE } });
    const text = (result.content as { type: string; text?: string }[])[0]?.text;
    if (result.isError || text !== `Echo: ${MESSAGE}`)
      throw new Error(`direct stdio: unexpected ${JSON.stringify(result)}`);
  };
  const hostSide: Side = {
    label: 'direct SDK (stdio)',
    pids: { bench: process.pid, upstream: transport.pid ?? undefined },
    async load(c, s) {
      const times: number[] = [];
      const until = performance.now() + s * 1000;
      await Promise.all(
        Array.from({ length: c }, async () => {
          while (performance.now() < until) {
            const t = performance.now();
            await hostCall();
            times.push(performance.now() - t);
          }
        }),
      );
      return times;
    },
  };
  const call = () =>
    fetch(`${stdioBase}/tools/everything__echo/execute`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ message: MESSAGE }),
    });
  // The catalog is read once the worker started the server: wait for the tool.
  for (let i = 0; ; i++) {
    const answer = await call();
    const body = await answer.text();
    if (answer.status === 200 && body.includes(`Echo: ${MESSAGE}`)) break;
    if (i > 300) throw new Error(`stdio through toolgate: ${answer.status} ${body}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const settleStdio = async () => {
    for (;;) {
      const answer = await call();
      await answer.arrayBuffer();
      if (answer.status === 200) return;
      if (answer.status !== 429) throw new Error(`stdio through toolgate: ${answer.status}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const gatewaySide: Side = {
    label: 'through toolgate (stdio)',
    pids: {
      bench: process.pid,
      gateway: stdioGateway.pid,
      worker: stdioWorker.pid,
      redis: benchRedisPid,
    },
    async load(c, s) {
      const times: number[] = [];
      const run = autocannon({
        url: `${stdioBase}/tools/everything__echo/execute`,
        method: 'POST',
        headers,
        body: JSON.stringify({ message: MESSAGE }),
        connections: c,
        duration: s,
        verifyBody: (body) => String(body).includes(`"result":"Echo: ${MESSAGE}"`),
      }) as unknown as autocannon.Instance & Promise<autocannon.Result>;
      run.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) =>
        times.push(ms),
      );
      const result = await run;
      const failed = result.errors + result.timeouts + result.non2xx + result.mismatches;
      if (failed > 0) throw new Error(`stdio through toolgate: ${failed} failed calls`);
      return times;
    },
    settle: settleStdio,
  };

  const pair = [hostSide, gatewaySide];
  for (const side of pair) {
    await side.load(16, warmUpSeconds);
    await side.settle?.();
  }
  const totals = new Map<string, { times: number[]; seconds: number; cpu: number }>();
  for (let round = 1; round <= rounds; round++) {
    for (const c of concurrencies) {
      const line: string[] = [];
      for (const side of round % 2 === 1 ? pair : [...pair].reverse()) {
        const pids = Object.values(side.pids).filter((p): p is number => p !== undefined);
        const before = pids.map((p) => cpuMs(p) ?? 0);
        const t = performance.now();
        const times = await side.load(c, seconds);
        const elapsed = (performance.now() - t) / 1000;
        const cpu = pids.reduce((sum, p, i) => sum + (cpuMs(p) ?? 0) - before[i]!, 0);
        await side.settle?.();
        const k = `${side.label}@${c}`;
        const total = totals.get(k) ?? { times: [], seconds: 0, cpu: 0 };
        total.times.push(...times);
        total.seconds += elapsed;
        total.cpu += cpu;
        totals.set(k, total);
        times.sort((x, y) => x - y);
        line.push(
          `${side.label}: ${(times.length / elapsed).toFixed(0)} calls/s, p50 ${percentile(times, 50).toFixed(2)} ms`,
        );
      }
      progress(`  stdio round ${round}/${rounds} c=${c}  ${line.join('  |  ')}`);
    }
  }
  await stop(stdioGateway);
  await stop(stdioWorker);
  await host.close();

  console.log('');
  console.log(
    `server-everything echo over stdio (${driver} sandbox), through toolgate vs the SDK client spawning it`,
  );
  for (const c of concurrencies) {
    const [h, g] = pair.map((side) => {
      const t = totals.get(`${side.label}@${c}`)!;
      const sorted = [...t.times].sort((a, b) => a - b);
      return {
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
        rate: t.times.length / t.seconds,
        cpuUs: (t.cpu * 1000) / t.times.length,
      };
    }) as [{ p50: number; p99: number; rate: number; cpuUs: number }, typeof h];
    console.log(`  concurrency ${c}`);
    for (const [side, r] of [
      [hostSide, h],
      [gatewaySide, g],
    ] as const)
      console.log(
        `    ${side.label.padEnd(26)} p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  ${r.rate.toFixed(0)} calls/s   CPU per call ${r.cpuUs.toFixed(0)} µs (${Object.keys(side.pids).join(', ')})`,
      );
    console.log(
      `    toolgate / direct: p50 +${(g.p50 - h.p50).toFixed(2)} ms, throughput ${(g.rate / h.rate).toFixed(2)}×`,
    );
  }
}
