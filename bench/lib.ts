// Shared helpers for the benchmarks: a Redis to run against, child services, percentiles.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseSandboxConfig } from '@toolgate/sandbox';
import { DockerDriver, LABEL_DEPLOYMENT } from '@toolgate/sandbox/docker';
import { Redis } from 'ioredis';

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
/** The throwaway redis-server's pid, when benchRedis started one. */
export let benchRedisPid: number | undefined;
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

/** REDIS_URL, or a throwaway redis-server on a free loopback port. */
export async function benchRedis(): Promise<string> {
  if (process.env.REDIS_URL) return process.env.REDIS_URL;
  const port = await freePort();
  const redis = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  children.push(redis);
  benchRedisPid = redis.pid;
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

/** /proc/<pid>/stat counts CPU time in clock ticks (USER_HZ: 100 on Linux). */
const CLOCK_TICKS = 100;

/** CPU time (user + system, ms) a process has used so far; undefined where /proc is missing. */
export function cpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/**
 * Unmounts whatever a run left mounted under `dir` (workspace images, warm-pool slots: they
 * outlive the worker by design), deepest first, so the directory can be removed.
 */
export function unmountUnder(dir: string): void {
  const mounts = readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[1] ?? '')
    .map((p) => p.replace(/\\040/g, ' '))
    .filter((p) => p === dir || p.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const mount of mounts) {
    try {
      execFileSync('umount', ['-l', mount], { stdio: 'ignore' });
    } catch {
      // already gone
    }
  }
}

/**
 * Host processes whose command line contains `marker`. A sandbox's processes are host
 * processes (docker and bwrap alike), so a unique argument finds a call's program.
 */
export function processesWith(marker: string): number {
  let found = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').includes(marker))
        found++;
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/** One request to the Docker engine API on its unix socket; the parsed JSON answer, if any. */
function dockerApi(method: 'GET' | 'DELETE', path: string): Promise<unknown> {
  const socketPath = parseSandboxConfig({}).docker.socketPath;
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        if ((res.statusCode ?? 500) >= 400 && res.statusCode !== 404) {
          reject(new Error(`docker ${method} ${path}: ${res.statusCode} ${body}`));
        } else resolve(body ? (JSON.parse(body) as unknown) : undefined);
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Ids of the containers, running or not, of the deployment whose state lives in `stateDir`
 * (the label every container of a deployment carries: host + stateDir), so a toolgate running
 * beside a bench is left alone. Straight from the engine API: a `docker ps` costs ~50 ms, too
 * coarse to time a removal.
 */
export async function deploymentContainers(stateDir: string): Promise<string[]> {
  const deployment = new DockerDriver(parseSandboxConfig({ stateDir })).deploymentId;
  const filters = encodeURIComponent(
    JSON.stringify({ label: [`${LABEL_DEPLOYMENT}=${deployment}`] }),
  );
  const list = (await dockerApi('GET', `/containers/json?all=1&filters=${filters}`)) as {
    Id: string;
  }[];
  return list.map((c) => c.Id);
}

/** Force-removes containers (gone already is fine). */
export async function removeContainers(ids: string[]): Promise<void> {
  await Promise.all(ids.map((id) => dockerApi('DELETE', `/containers/${id}?force=1`)));
}

/** Redis commands per call, by command family (lowercase name), the most frequent first. */
export interface CommandsPerCall {
  total: number;
  families: [string, number][];
  /** Idle traffic taken out, per call. */
  idlePerCall: number;
}

/** INFO commandstats as calls per command; INFO itself left out (that is the bench asking). */
async function commandCounts(redis: Redis): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const m of (await redis.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (m[1] !== 'info') counts.set(m[1]!, Number(m[2]));
  }
  return counts;
}

/**
 * Redis commands per call around `run` (which returns how many calls it made), from INFO
 * commandstats: Lua scripts' own commands included, and the traffic the same processes send
 * with no calls (blocking pops timing out, heartbeats, sweeps) taken out. That idle rate is the
 * lower of two windows per family, so a periodic job caught in one window is not charged to
 * the calls.
 */
export async function redisCommandsPerCall(
  redisUrl: string,
  run: () => Promise<number>,
  idleMs = 2000,
): Promise<CommandsPerCall> {
  const redis = new Redis(redisUrl);
  try {
    const windows: Map<string, number>[] = [];
    for (let i = 0; i < 2; i++) {
      const before = await commandCounts(redis);
      const t = performance.now();
      await sleep(idleMs);
      const after = await commandCounts(redis);
      const ms = performance.now() - t;
      windows.push(new Map([...after].map(([k, n]) => [k, (n - (before.get(k) ?? 0)) / ms])));
    }
    const idle = (name: string) => Math.min(...windows.map((w) => w.get(name) ?? 0));
    const before = await commandCounts(redis);
    const t = performance.now();
    const calls = await run();
    const ms = performance.now() - t;
    const after = await commandCounts(redis);
    const families = [...after]
      .map(([name, n]): [string, number] => [
        name,
        Math.max(0, n - (before.get(name) ?? 0) - idle(name) * ms) / calls,
      ])
      .filter(([, perCall]) => perCall >= 0.05)
      .sort((a, b) => b[1] - a[1]);
    const idleTotal = [...new Set(windows.flatMap((w) => [...w.keys()]))].reduce(
      (sum, name) => sum + idle(name),
      0,
    );
    return {
      total: families.reduce((sum, [, v]) => sum + v, 0),
      families,
      idlePerCall: (idleTotal * ms) / calls,
    };
  } finally {
    redis.disconnect();
  }
}

/** The top families of a count, e.g. `HMGET 11.0, HINCRBY 10.0, …`. */
export function topFamilies(counts: CommandsPerCall, top = 16): string {
  return counts.families
    .slice(0, top)
    .map(([name, v]) => `${name.toUpperCase()} ${v.toFixed(1)}`)
    .join(', ');
}
