/**
 * A cgroup per bwrap call: memory, pids and CPU limits, OOM detection, and a way to kill
 * every process of the call. cgroup v1 (memory, pids, cpu hierarchies) or v2 (unified);
 * unavailable when not root or not writable, and the bwrap driver then falls back to rlimits.
 */
import {
  access,
  mkdir,
  readFile,
  readdir,
  rmdir,
  stat,
  writeFile,
  constants,
} from 'node:fs/promises';
import path from 'node:path';
import type { ResourceLimits } from './types.js';

const ROOT = '/sys/fs/cgroup';
const GROUP = 'toolgate-sandbox';
const MiB = 1024 * 1024;

export type CgroupMode = 'v1' | 'v2' | 'none';

export async function detectCgroups(): Promise<CgroupMode> {
  if (process.getuid?.() !== 0) return 'none';
  const writable = (p: string) =>
    access(p, constants.W_OK).then(
      () => true,
      () => false,
    );
  try {
    const controllers = await readFile(path.join(ROOT, 'cgroup.controllers'), 'utf8');
    if (['memory', 'pids', 'cpu'].every((c) => controllers.includes(c)) && (await writable(ROOT))) {
      const parent = path.join(ROOT, GROUP);
      await mkdir(parent, { recursive: true });
      await writeFile(path.join(ROOT, 'cgroup.subtree_control'), '+memory +pids +cpu').catch(
        () => undefined,
      );
      await writeFile(path.join(parent, 'cgroup.subtree_control'), '+memory +pids +cpu');
      return 'v2';
    }
  } catch {
    // not v2
  }
  for (const c of ['memory', 'pids', 'cpu']) {
    const dir = path.join(ROOT, c);
    try {
      await mkdir(path.join(dir, GROUP), { recursive: true });
    } catch {
      return 'none';
    }
  }
  return 'v1';
}

export class CallCgroup {
  constructor(
    private readonly mode: 'v1' | 'v2',
    private readonly dirs: { memory: string; pids: string; cpu: string },
  ) {}

  static async create(
    mode: CgroupMode,
    id: string,
    limits: ResourceLimits,
  ): Promise<CallCgroup | undefined> {
    if (mode === 'none') return undefined;
    const memory = limits.memoryMb * MiB;
    if (mode === 'v2') {
      const dir = path.join(ROOT, GROUP, id);
      await mkdir(dir);
      const cg = new CallCgroup('v2', { memory: dir, pids: dir, cpu: dir });
      await writeFile(path.join(dir, 'memory.max'), String(memory));
      await writeFile(path.join(dir, 'memory.swap.max'), '0').catch(() => undefined);
      await writeFile(path.join(dir, 'pids.max'), String(limits.pids));
      await writeFile(path.join(dir, 'cpu.max'), `${Math.round(limits.cpus * 100_000)} 100000`);
      return cg;
    }
    const dirs = {
      memory: path.join(ROOT, 'memory', GROUP, id),
      pids: path.join(ROOT, 'pids', GROUP, id),
      cpu: path.join(ROOT, 'cpu', GROUP, id),
    };
    const cg = new CallCgroup('v1', dirs);
    try {
      for (const d of Object.values(dirs)) await mkdir(d);
      await writeFile(path.join(dirs.memory, 'memory.limit_in_bytes'), String(memory));
      // Count swap too, where the kernel accounts it, so the limit cannot be dodged.
      await writeFile(path.join(dirs.memory, 'memory.memsw.limit_in_bytes'), String(memory)).catch(
        () => undefined,
      );
      await writeFile(path.join(dirs.pids, 'pids.max'), String(limits.pids));
      await writeFile(path.join(dirs.cpu, 'cpu.cfs_period_us'), '100000');
      await writeFile(
        path.join(dirs.cpu, 'cpu.cfs_quota_us'),
        String(Math.round(limits.cpus * 100_000)),
      );
    } catch (err) {
      await cg.destroy();
      throw err;
    }
    return cg;
  }

  /** The cgroup.procs files a process writes its pid to, to join. */
  get procsFiles(): string[] {
    return [...new Set(Object.values(this.dirs))].map((d) => path.join(d, 'cgroup.procs'));
  }

  async oomKilled(): Promise<boolean> {
    const file = this.mode === 'v2' ? 'memory.events' : 'memory.oom_control';
    const text = await readFile(path.join(this.dirs.memory, file), 'utf8').catch(() => '');
    const m = /^oom_kill (\d+)/m.exec(text);
    return m !== null && Number(m[1]) > 0;
  }

  /** Memory the cgroup's processes use now, bytes. */
  async memoryBytes(): Promise<number | undefined> {
    const file = this.mode === 'v2' ? 'memory.current' : 'memory.usage_in_bytes';
    const text = await readFile(path.join(this.dirs.memory, file), 'utf8').catch(() => undefined);
    return text !== undefined && /^\d+\s*$/.test(text) ? Number(text) : undefined;
  }

  async pids(): Promise<number[]> {
    const text = await readFile(path.join(this.dirs.pids, 'cgroup.procs'), 'utf8').catch(() => '');
    return text.split('\n').filter(Boolean).map(Number);
  }

  /** SIGKILLs every process in the cgroup until none is left (forks racing the kill included). */
  async killAll(): Promise<void> {
    if (this.mode === 'v2') {
      const ok = await writeFile(path.join(this.dirs.pids, 'cgroup.kill'), '1').then(
        () => true,
        () => false,
      );
      if (ok) return;
    }
    for (let i = 0; i < 50; i++) {
      const pids = await this.pids();
      if (pids.length === 0) return;
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  async destroy(): Promise<void> {
    for (const d of new Set(Object.values(this.dirs))) {
      for (let i = 0; i < 20; i++) {
        const ok = await rmdir(d).then(
          () => true,
          (e: NodeJS.ErrnoException) => e.code === 'ENOENT',
        );
        if (ok) break;
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  }
}

/**
 * Kills what is left in the cgroups of workers that are gone, and removes those cgroups: the
 * bwrap driver's reaper. A cgroup is named `<worker pid>-…` (bwrap.ts); its worker is gone when
 * no process has that pid. bwrap's --die-with-parent usually ends a dead worker's sandboxes at
 * once; this catches one that outlived it. Returns the cgroups removed.
 */
export async function reapDeadWorkers(mode: CgroupMode): Promise<number> {
  if (mode === 'none') return 0;
  const parents =
    mode === 'v2'
      ? [path.join(ROOT, GROUP)]
      : ['memory', 'pids', 'cpu'].map((c) => path.join(ROOT, c, GROUP));
  const dead = new Set<string>();
  for (const entry of await readdir(parents[0]!, { withFileTypes: true }).catch(() => [])) {
    const pid = Number(/^(\d+)-/.exec(entry.name)?.[1]);
    if (entry.isDirectory() && pid > 0 && !pidAlive(pid)) dead.add(entry.name);
  }
  for (const name of dead) {
    const dirs = parents.map((p) => path.join(p, name));
    const cg = new CallCgroup(mode, {
      memory: dirs[0]!,
      pids: dirs[mode === 'v2' ? 0 : 1]!,
      cpu: dirs[mode === 'v2' ? 0 : 2]!,
    });
    await cg.killAll();
    await cg.destroy();
  }
  return dead.size;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes call cgroups left empty by a worker that died (older than maxAgeMs). */
export async function removeStaleCgroups(mode: CgroupMode, maxAgeMs = 600_000): Promise<void> {
  if (mode === 'none') return;
  const parents =
    mode === 'v2'
      ? [path.join(ROOT, GROUP)]
      : ['memory', 'pids', 'cpu'].map((c) => path.join(ROOT, c, GROUP));
  for (const parent of parents) {
    for (const entry of await readdir(parent, { withFileTypes: true }).catch(() => [])) {
      if (!entry.isDirectory()) continue;
      const dir = path.join(parent, entry.name);
      const st = await stat(dir).catch(() => undefined);
      // rmdir fails on a cgroup that still has processes: only empty ones go.
      if (st && Date.now() - st.mtimeMs > maxAgeMs) await rmdir(dir).catch(() => undefined);
    }
  }
}
