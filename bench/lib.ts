// Shared helpers for the benchmarks: a Redis to run against, child services, percentiles.
import { spawn, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'node:http';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

const children: ChildProcess[] = [];
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

/** REDIS_URL, or a throwaway redis-server on a free loopback port. */
export async function benchRedis(): Promise<string> {
  if (process.env.REDIS_URL) return process.env.REDIS_URL;
  const port = await freePort();
  children.push(
    spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    ),
  );
  await new Promise((r) => setTimeout(r, 300));
  return `redis://127.0.0.1:${port}`;
}

/** Runs a TypeScript entry point in its own process; resolves once `ready` appears in its output. */
export async function startTs(
  entry: string,
  env: Record<string, string>,
  ready: RegExp,
): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    ['--conditions=@toolgate/source', '--import', 'tsx', entry],
    {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  children.push(child);
  let out = '';
  await new Promise<void>((resolve, reject) => {
    const onData = (b: Buffer) => {
      out += b.toString();
      if (ready.test(out)) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) =>
      reject(new Error(`${entry} exited (${code}) before ready:\n${out}`)),
    );
  });
  return child;
}

export function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export interface Measure {
  p50: number;
  p99: number;
  /** calls per second at the given concurrency */
  throughput: number;
}

/**
 * Latency from `sequential` calls one at a time (after `warmUpSeconds` of calls), throughput
 * from `concurrency` callers running for `seconds`.
 */
export async function measure(
  call: () => Promise<void>,
  { sequential = 500, concurrency = 64, seconds = 5, warmUpSeconds = 3, label = '' } = {},
): Promise<Measure> {
  // Steady state, not JIT warm-up: both sides get the same warm-up before anything is timed.
  const warmUntil = performance.now() + warmUpSeconds * 1000;
  while (performance.now() < warmUntil) await call();
  const times: number[] = [];
  for (let i = 0; i < sequential; i++) {
    const t = performance.now();
    await call();
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  let done = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        await call();
        done++;
      }
    }),
  );
  const result = {
    p50: percentile(times, 50),
    p99: percentile(times, 99),
    throughput: done / seconds,
  };
  console.log(
    `  ${label.padEnd(28)} p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  ${result.throughput.toFixed(0)} calls/s @${concurrency}`,
  );
  return result;
}

/**
 * A lean keep-alive HTTP client for load generation (node:http; fetch costs ~0.6 ms more per
 * call on this machine, which would be charged to the system under test).
 */
export function httpClient(base: string, concurrency: number) {
  const url = new URL(base);
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  return {
    post(
      path: string,
      headers: Record<string, string>,
      body: string,
    ): Promise<{ status: number; text: string }> {
      return new Promise((resolve, reject) => {
        const req = request(
          {
            host: url.hostname,
            port: url.port,
            path,
            method: 'POST',
            agent,
            headers: { ...headers, 'content-length': Buffer.byteLength(body) },
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () =>
              resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }),
            );
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    },
    close: () => agent.destroy(),
  };
}
