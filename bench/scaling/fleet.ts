// The gateway and worker processes of the scaling benchmark: grown and shrunk to each step's
// counts against one Redis, and everything they started (bwrap sandboxes included) removed after.
import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { freePort, startTs } from '../lib.js';

interface Service {
  child: ChildProcess;
  pid: number;
  /** The gateway's base URL; undefined for a worker. */
  url?: string;
}

/** A host process, told apart from a later one that reuses its pid by its start time. */
interface HostProcess {
  pid: number;
  startedAt: string;
}

export class Fleet {
  readonly gateways: Service[] = [];
  readonly workers: Service[] = [];
  /** Every process a worker started (sandboxes), seen while it ran. */
  private readonly spawned = new Map<number, HostProcess>();

  constructor(
    private readonly env: Record<string, string>,
    /** A path only this run's sandboxes carry on their command line (their workspace root). */
    private readonly marker: string,
    private readonly progress: (line: string) => void,
  ) {}

  /** Starts or stops processes (the newest first) until `gateways` and `workers` run. */
  async scaleTo(gateways: number, workers: number): Promise<void> {
    while (this.workers.length > workers) await this.stopWorker(this.workers.pop()!);
    while (this.gateways.length > gateways) {
      const gateway = this.gateways.pop()!;
      this.progress(`stopping gateway ${this.gateways.length + 1}`);
      await stop(gateway.child);
    }
    while (this.workers.length < workers) {
      this.progress(`starting worker ${this.workers.length + 1}/${workers}`);
      const child = await startTs(
        'services/worker/src/main.ts',
        { ...this.env, WORKER_METRICS_PORT: '0' },
        /worker started/,
      );
      this.workers.push({ child, pid: child.pid! });
    }
    while (this.gateways.length < gateways) {
      this.progress(`starting gateway ${this.gateways.length + 1}/${gateways}`);
      const port = await freePort();
      const child = await startTs(
        'services/gateway/src/main.ts',
        // No metrics listener: the default 9092 is taken by the second gateway, or another's.
        { ...this.env, PORT: String(port), GATEWAY_METRICS_PORT: '0' },
        /gateway listening/,
      );
      this.gateways.push({ child, pid: child.pid!, url: `http://127.0.0.1:${port}` });
    }
  }

  /** Notes the processes the workers have started so far; called while calls run. */
  recordSandboxes(): void {
    const parents = parentsByPid();
    const workers = new Set(this.workers.map((w) => w.pid));
    for (const [pid, ppid] of parents) {
      // A descendant: walk up to a worker (or to init).
      for (let p: number | undefined = ppid; p !== undefined && p > 1; p = parents.get(p)) {
        if (!workers.has(p)) continue;
        const startedAt = startTime(pid);
        if (startedAt !== undefined) this.spawned.set(pid, { pid, startedAt });
        break;
      }
    }
  }

  /**
   * Stops every process, then kills whatever sandbox outlived its worker: the descendants seen
   * while they ran and any process carrying this run's workspace path. Returns how many there
   * were (0 when the workers cleaned up after themselves, as they should).
   */
  async close(): Promise<number> {
    await this.scaleTo(0, 0);
    // A sandbox the worker killed on its way out may still be exiting, or be a zombie until
    // init reaps it: give them a moment before calling anything left behind.
    let left = this.survivors();
    for (let i = 0; i < 20 && left.size > 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      left = this.survivors();
    }
    for (const { pid } of left.values()) {
      this.progress(`killing pid ${pid} left behind: ${commandLine(pid)}`);
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    return left.size;
  }

  /** Recorded or marked processes still running (zombies are done running). */
  private survivors(): Map<number, HostProcess> {
    const left = new Map<number, HostProcess>();
    const alive = (pid: number) => {
      const stat = procStat(pid);
      return stat !== undefined && stat[0] !== 'Z' ? stat[19] : undefined;
    };
    for (const p of this.spawned.values()) if (alive(p.pid) === p.startedAt) left.set(p.pid, p);
    for (const pid of processesCarrying(this.marker)) {
      const startedAt = alive(pid);
      if (startedAt !== undefined) left.set(pid, { pid, startedAt });
    }
    return left;
  }

  private async stopWorker(worker: Service): Promise<void> {
    this.progress(`stopping worker ${this.workers.length + 1}`);
    this.recordSandboxes();
    await stop(worker.child); // SIGTERM: it drains its calls and closes its sandbox driver
  }
}

function parentsByPid(): Map<number, number> {
  const parents = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const ppid = Number(readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
      parents.set(Number(name), ppid);
    } catch {
      // exited meanwhile
    }
  }
  return parents;
}

/** The fields of /proc/<pid>/stat after the command name: [0] state, [19] start time. */
function procStat(pid: number): string[] | undefined {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  } catch {
    return undefined;
  }
}

/** The process's start time in ticks since boot: with the pid, it names one process. */
function startTime(pid: number): string | undefined {
  return procStat(pid)?.[19];
}

function processesCarrying(marker: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').join(' ').includes(marker))
        found.push(Number(name));
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').slice(0, 200);
  } catch {
    return '(gone)';
  }
}

/** How long a service may take to drain after SIGTERM before it is killed. */
const STOP_GRACE_MS = 15_000;

/** SIGTERM, then SIGKILL if it has not exited within the grace period. */
function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const kill = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
