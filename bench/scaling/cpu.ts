// Where the CPU of a scaling step went: Redis (its own INFO counters), each process (/proc), and
// the whole machine (/proc/stat, which also sees whatever else runs on it).
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';

/** /proc/<pid>/stat and /proc/stat count CPU time in clock ticks (USER_HZ: 100 on Linux). */
const TICK_MS = 10;

export interface ProcessCpu {
  /** The process's own user + system time, ms. */
  ownMs: number;
  /**
   * User + system time of its children that have exited and been waited for, ms. A worker's
   * sandboxes (launcher → bwrap → python) end up here once each call's launcher is reaped.
   */
  childrenMs: number;
}

/** undefined once the process is gone. */
export function processCpu(pid: number): ProcessCpu | undefined {
  try {
    // Fields after the command name, which may itself hold spaces: state is [0], utime [11].
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ').map(Number);
    return {
      ownMs: (f[11]! + f[12]!) * TICK_MS,
      childrenMs: (f[13]! + f[14]!) * TICK_MS,
    };
  } catch {
    return undefined;
  }
}

/** Busy and total CPU time of the whole machine so far, ms (all cores). */
export function machineCpu(): { busyMs: number; totalMs: number } {
  const [, ...ticks] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const [user, nice, system, idle, iowait, irq, softirq, steal] = ticks.map(Number) as number[];
  const busy = user! + nice! + system! + irq! + softirq! + steal!;
  return { busyMs: busy * TICK_MS, totalMs: (busy + idle! + iowait!) * TICK_MS };
}

/** used_cpu_user + used_cpu_sys of the Redis server (main thread and its I/O threads), ms. */
export async function redisCpuMs(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1]);
  return (field('used_cpu_user') + field('used_cpu_sys')) * 1000;
}

/** Per command (lowercase name): how many times Redis ran it and the µs it spent in it so far. */
export type CommandStats = Map<string, { calls: number; usec: number }>;

/**
 * INFO commandstats: where Redis's time goes by command. Its µs count the commands' execution
 * only (not reading and parsing requests, not writing replies), so they add up to less than
 * used_cpu.
 */
export async function redisCommandStats(redis: Redis): Promise<CommandStats> {
  const stats: CommandStats = new Map();
  for (const m of (await redis.info('commandstats')).matchAll(
    /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm,
  )) {
    stats.set(m[1]!, { calls: Number(m[2]), usec: Number(m[3]) });
  }
  return stats;
}
