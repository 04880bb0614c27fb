// SPEC §9, first bullet: calculator through HTTP → gateway → BullMQ → worker, against a bare
// BullMQ add + waitUntilFinished on the same Redis, in one run. Prints ratios.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import { benchRedis, freePort, httpClient, measure, startTs, stop } from './lib.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 64);
const sequential = Number(process.env.BENCH_SEQUENTIAL ?? 500);
const redisUrl = await benchRedis();
console.log(
  `toolgate gateway benchmark — Redis ${redisUrl}, ${seconds} s at concurrency ${concurrency}, ${sequential} sequential calls`,
);

// Baseline: raw BullMQ.
const rawWorker = await startTs('bench/raw-worker.ts', { REDIS_URL: redisUrl }, /raw worker ready/);
const connection = new Redis(redisUrl, { maxRetriesPerRequest: null });
const queue = new Queue('raw-bench', { connection });
const events = new QueueEvents('raw-bench', {
  connection: new Redis(redisUrl, { maxRetriesPerRequest: null }),
});
await events.waitUntilReady();
const raw = await measure(
  async () => {
    const job = await queue.add(
      'calc',
      { expression: '2*(3+4)' },
      { removeOnComplete: { count: 1000 } },
    );
    const result = await job.waitUntilFinished(events);
    if (result !== 14) throw new Error(`raw: unexpected ${result}`);
  },
  { sequential, concurrency, seconds, label: 'raw BullMQ add+wait' },
);
await stop(rawWorker);
await events.close();
await queue.close();

// toolgate: the real gateway and worker processes.
const key = 'bench-key-0123456789abcdef';
const config = join(mkdtempSync(join(tmpdir(), 'toolgate-bench-')), 'toolgate.yaml');
writeFileSync(
  config,
  `clients:\n  - id: bench\n    key: ${key}\n    rateLimit: { perMinute: 100000000 }\nlog: { level: warn }\n`,
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
};
const worker = await startTs('services/worker/src/main.ts', env, /worker started/);
const gateway = await startTs('services/gateway/src/main.ts', env, /gateway listening/);
const client = httpClient(`http://127.0.0.1:${port}`, concurrency);
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
const body = JSON.stringify({ expression: '2*(3+4)' });
const viaGateway = await measure(
  async () => {
    const res = await client.post('/tools/calculator/execute', headers, body);
    const parsed = JSON.parse(res.text) as { result?: number };
    if (parsed.result !== 14) throw new Error(`gateway: unexpected ${res.text}`);
  },
  { sequential, concurrency, seconds, label: 'toolgate HTTP→queue→worker' },
);
client.close();
await stop(gateway);
await stop(worker);
connection.disconnect();

const throughputRatio = viaGateway.throughput / raw.throughput;
const p50Ratio = viaGateway.p50 / raw.p50;
const p99Ratio = viaGateway.p99 / raw.p99;
console.log('');
console.log(
  `throughput ratio (toolgate / raw): ${throughputRatio.toFixed(2)}   target ≥ 0.5, aim 0.8`,
);
console.log(`p50 ratio        (toolgate / raw): ${p50Ratio.toFixed(2)}   target ≤ 2`);
console.log(`p99 ratio        (toolgate / raw): ${p99Ratio.toFixed(2)}`);
process.exit(0);
