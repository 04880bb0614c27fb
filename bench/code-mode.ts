// Issue 23 §3's code-mode numbers (docs/code-mode.md, "Measured"), in one run against a real
// worker (docker sandbox) and gateway:
//
// - A nested tool call's round trip from inside the sandbox (Python → the channel socket → the
//   worker → POST /v1/code-mode/calls → the pipeline → the fast queue → back) against the same
//   call over HTTP from the host (POST /tools/calculator/execute), p50 of each, sequential.
//   Target: ratio ≤ 1.5.
// - Bytes returned to the model for the 20-fetch task: one run_code_with_tools call that
//   fetches 20 JSON documents from a local server and prints a one-line summary, against
//   twenty http_get calls, both through the dialect bridge (POST /v1/tool-calls, OpenAI Chat):
//   the `content` strings the model would read.
//
// Results on stdout. Env: BENCH_SAMPLES (nested calls per script and host calls, default 200),
// BENCH_ROUNDS (3; the sides alternate), BENCH_DOC_BYTES (each fetched document, 2000).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchRedis, freePort, percentile, startTs, stop, unmountUnder } from './lib.js';

const samples = Number(process.env.BENCH_SAMPLES ?? 200);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const docBytes = Number(process.env.BENCH_DOC_BYTES ?? 2000);
const TARGET_RATIO = 1.5;

/** Twenty JSON documents: /item/<n> → {id, price, notes} of about BENCH_DOC_BYTES. */
const items = createServer((req, res) => {
  const n = /^\/item\/(\d+)$/.exec(req.url ?? '')?.[1];
  if (!n) return void res.writeHead(404).end();
  const doc = { id: Number(n), price: Number(n) * 10, notes: '' };
  doc.notes = 'n'.repeat(Math.max(0, docBytes - JSON.stringify(doc).length));
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(doc));
});
await new Promise<void>((resolve) => items.listen(0, '127.0.0.1', resolve));
const itemsUrl = `http://127.0.0.1:${(items.address() as { port: number }).port}`;

const redisUrl = await benchRedis();
const dir = mkdtempSync(join(tmpdir(), 'toolgate-bench-cm-'));
const key = 'bench-key-0123456789abcdef';
const config = join(dir, 'toolgate.yaml');
const port = await freePort();
writeFileSync(
  config,
  [
    'clients:',
    `  - { id: bench, key: ${key}, rateLimit: { perMinute: 100000000 } }`,
    'log: { level: warn }',
    // A script's nested calls count in its loop guard: room for the samples.
    `policy: { http: { allowHosts: [127.0.0.1] }, loopGuard: { maxCalls: 100000 } }`,
    `codeMode: { gatewayUrl: 'http://127.0.0.1:${port}', maxCalls: ${samples + 10} }`,
    'sandbox:',
    '  driver: docker',
    `  workspacesRoot: ${join(dir, 'workspaces')}`,
    `  stateDir: ${join(dir, 'state')}`,
  ].join('\n'),
);
const env = {
  REDIS_URL: redisUrl,
  TOOLGATE_CONFIG: config,
  PORT: String(port),
  HOST: '127.0.0.1',
  WORKER_METRICS_PORT: '0',
  GATEWAY_METRICS_PORT: '0',
  TOOLGATE_REDIS_PREFIX: 'bench-cm',
  TOOLGATE_LOG_LEVEL: 'info',
};
const worker = await startTs('services/worker/src/main.ts', env, /worker started/);
const gateway = await startTs('services/gateway/src/main.ts', env, /gateway listening/);
const base = `http://127.0.0.1:${port}`;
let stopping = false;
for (const [name, child] of [
  ['worker', worker],
  ['gateway', gateway],
] as const) {
  // A service gone mid-run would leave requests hanging: fail loudly instead.
  child.once('exit', (code, signal) => {
    if (stopping) return;
    console.error(`the ${name} exited during the benchmark (${signal ?? code})`);
    process.exit(1);
  });
}
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

async function execute(tool: string, args: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${base}/tools/${tool}/execute`, {
    method: 'POST',
    headers,
    body: JSON.stringify(args),
  });
  return (await res.json()) as Record<string, unknown>;
}

/** p50 of `samples` nested calculator calls, timed inside the script (ms). */
async function nestedP50(round: number): Promise<number> {
  const code = `import time, json
times = []
for i in range(${samples}):
    t = time.perf_counter()
    toolgate.calculator(expression=f"{i}+${round * 100_000}")
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps(times))`;
  const out = (await execute('run_code_with_tools', { code, timeoutSeconds: 300 })) as {
    result?: { stdout: string; stderr: string };
  };
  if (!out.result?.stdout) throw new Error(`script failed: ${JSON.stringify(out).slice(0, 500)}`);
  const times = (JSON.parse(out.result.stdout) as number[]).sort((a, b) => a - b);
  return percentile(times, 50);
}

/** p50 of `samples` calculator calls over HTTP from here (ms). */
async function hostP50(round: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < samples; i++) {
    const t = performance.now();
    const out = await execute('calculator', { expression: `${i}+${round * 100_000 + 50_000}` });
    if (out.status !== 'ok') throw new Error(`host call failed: ${JSON.stringify(out)}`);
    times.push(performance.now() - t);
  }
  return percentile(
    times.sort((a, b) => a - b),
    50,
  );
}

/** What the model reads back from the bridge for these tool calls (OpenAI Chat). */
async function bridgeContentBytes(calls: { name: string; args: unknown }[]): Promise<number> {
  const res = await fetch(`${base}/v1/tool-calls?dialect=openai-chat`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      tool_calls: calls.map((c, i) => ({
        id: `call_${Date.now()}_${i}`,
        type: 'function',
        function: { name: c.name, arguments: JSON.stringify(c.args) },
      })),
    }),
  });
  const body = (await res.json()) as { messages: { content: string }[] };
  return body.messages.reduce((n, m) => n + Buffer.byteLength(m.content), 0);
}

// Warm both paths (the warm pool, connections, the scripts' imports).
await nestedP50(99);
await hostP50(99);
const nested: number[] = [];
const host: number[] = [];
for (let r = 0; r < rounds; r++) {
  // Alternating which side goes first, so a slow stretch of the machine weighs on both.
  if (r % 2 === 0) {
    nested.push(await nestedP50(r));
    host.push(await hostP50(r));
  } else {
    host.push(await hostP50(r));
    nested.push(await nestedP50(r));
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const nestedMs = median(nested);
const hostMs = median(host);
// Per round, the two sides ran back to back: the median of their ratios is the figure.
const ratio = median(nested.map((n, i) => n / host[i]!));

const script = `import json
total = 0
for i in range(20):
    r = toolgate.http_get(url=f"${itemsUrl}/item/{i}")
    total += json.loads(r["body"])["price"]
print(f"20 items, total price {total}")`;
const codeModeBytes = await bridgeContentBytes([
  { name: 'run_code_with_tools', args: { code: script } },
]);
const separateBytes = await bridgeContentBytes(
  Array.from({ length: 20 }, (_, i) => ({
    name: 'http_get',
    args: { url: `${itemsUrl}/item/${i}` },
  })),
);

stopping = true;
await stop(gateway);
await stop(worker);
items.close();
unmountUnder(dir);
rmSync(dir, { recursive: true, force: true });

console.log(
  `toolgate code-mode benchmark — ${rounds} rounds of ${samples} sequential calls per side`,
);
console.log(
  `  nested call from the sandbox  p50 ${nestedMs.toFixed(2)} ms   (rounds: ${nested.map((x) => x.toFixed(2)).join(', ')})`,
);
console.log(
  `  same call over HTTP (host)    p50 ${hostMs.toFixed(2)} ms   (rounds: ${host.map((x) => x.toFixed(2)).join(', ')})`,
);
console.log(
  `  ratio (median of the rounds' ratios) ${ratio.toFixed(2)} (target ≤ ${TARGET_RATIO}) ${ratio <= TARGET_RATIO ? 'ok' : 'OVER TARGET'}`,
);
console.log(
  `  20-fetch task, bytes returned to the model: code mode ${codeModeBytes}, twenty http_get calls ${separateBytes} (documents of ${docBytes} bytes): ratio ${(codeModeBytes / separateBytes).toFixed(3)}`,
);
