/**
 * The docker driver's reaper: removes what dead workers left behind — containers, warm-pool
 * slot mounts, egress networks — and keeps this worker's heartbeat file fresh so the others
 * see it alive. Only this deployment's (host + stateDir) sandboxes are ever touched.
 */
import { mkdir, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import { reapChannelDirs } from './channel.js';
import type { SandboxConfig } from './config.js';
import { reapEgressNetworks } from './egress.js';
import type { SlotMounts } from './mounts.js';
import type { DriverOptions, SandboxLogger } from './types.js';

export const LABEL = 'toolgate.sandbox';
export const LABEL_OWNER = 'toolgate.owner';
export const LABEL_CREATED = 'toolgate.created';
export const LABEL_IMAGE = 'toolgate.image';
/** Host name and pid of the owning worker: lets any worker on the same host see it is alive. */
export const LABEL_HOST = 'toolgate.host';
export const LABEL_PID = 'toolgate.pid';
/**
 * Which toolgate deployment (host + stateDir) made a container: a reaper only ever removes its
 * own deployment's containers, so two toolgates sharing one Docker engine leave each other be.
 */
export const LABEL_DEPLOYMENT = 'toolgate.deployment';
/**
 * A long-lived sandbox (driver.open: an upstream's server, a session): it lives as long as its
 * owner wants, so reaper.maxAgeMs does not apply; it goes when its owner is gone.
 */
export const LABEL_LONG_LIVED = 'toolgate.long-lived';

export interface DockerReaperOptions {
  docker: Docker;
  config: SandboxConfig;
  owner: string;
  deployment: string;
  mounts: SlotMounts;
  isOwnerAlive: DriverOptions['isOwnerAlive'];
  /** Whether this driver still tracks the container (a call or the pool has it). */
  isLive: (containerId: string) => boolean;
  removeContainer: (container: Docker.Container) => Promise<void>;
  log: SandboxLogger;
}

export class DockerReaper {
  /** Containers removed since start. */
  reaped = 0;

  constructor(private readonly o: DockerReaperOptions) {}

  async heartbeat(): Promise<void> {
    const file = this.heartbeatFile(this.o.owner);
    await mkdir(path.dirname(file), { recursive: true });
    const now = new Date();
    await utimes(file, now, now).catch(() => writeFile(file, String(process.pid)));
  }

  async removeHeartbeat(): Promise<void> {
    await rm(this.heartbeatFile(this.o.owner), { force: true });
  }

  /**
   * Removes sandbox containers left behind: by a worker that is gone, older than
   * reaper.maxAgeMs whoever owns them (long-lived ones excepted), or ours but no longer tracked;
   * then the slot mounts, channel directories and egress networks of gone workers, and stale
   * heartbeat files.
   * Returns the containers removed.
   */
  async reap(): Promise<number> {
    const { docker, config, owner: self, deployment, mounts, log } = this.o;
    const list = await docker.listContainers({
      all: true,
      filters: { label: [`${LABEL}=1`, `${LABEL_DEPLOYMENT}=${deployment}`] },
    });
    const now = Date.now();
    const verdicts = new Map<string, boolean>();
    const alive = async (owner: string, labels?: Record<string, string>) => {
      if (!verdicts.has(owner)) verdicts.set(owner, await this.ownerAlive(owner, labels));
      return verdicts.get(owner)!;
    };
    let removed = 0;
    for (const info of list) {
      const owner = info.Labels[LABEL_OWNER] ?? '';
      const age = now - Number(info.Labels[LABEL_CREATED] ?? 0);
      let reap: boolean;
      if (age > config.reaper.maxAgeMs && info.Labels[LABEL_LONG_LIVED] !== '1') reap = true;
      else if (owner === self) reap = !this.o.isLive(info.Id) && age > 60_000;
      else reap = !(await alive(owner, info.Labels));
      if (!reap) continue;
      await this.o.removeContainer(docker.getContainer(info.Id));
      removed++;
    }
    for (const owner of await mounts.owners()) {
      if (owner !== self && !(await alive(owner))) await mounts.removeOwner(owner);
    }
    // A worker killed mid-script leaves its channel directories (channel.ts).
    await reapChannelDirs(config.stateDir, self, async (owner) => !(await alive(owner)));
    const ownersDir = path.dirname(this.heartbeatFile(self));
    for (const owner of await readdir(ownersDir).catch(() => [])) {
      const st = await stat(path.join(ownersDir, owner)).catch(() => undefined);
      if (st && now - st.mtimeMs > config.reaper.maxAgeMs)
        await rm(path.join(ownersDir, owner), { force: true });
    }
    await reapEgressNetworks(
      docker,
      `${LABEL_DEPLOYMENT}=${deployment}`,
      async (owner) => !(await alive(owner)),
      LABEL_OWNER,
      log,
    );
    if (removed > 0) log.info({ removed }, 'reaped leftover sandbox containers');
    this.reaped += removed;
    return removed;
  }

  private heartbeatFile(owner: string): string {
    return path.join(path.resolve(this.o.config.stateDir), 'owners', owner);
  }

  /**
   * Alive: it is us; or the owner ran on this host and its pid still exists; or the caller's
   * isOwnerAlive (the workers' Redis heartbeats) says so; else its heartbeat file in stateDir is
   * fresh. Workers on other hosts sharing this engine need a shared stateDir or isOwnerAlive.
   */
  private async ownerAlive(owner: string, labels: Record<string, string> = {}): Promise<boolean> {
    if (owner === this.o.owner) return true;
    // A live pid on this host is proof of life; a missing one is not proof of death (another
    // container may share the host name but not the pid namespace), so ask the heartbeats.
    const pid = Number(labels[LABEL_PID]);
    if (labels[LABEL_HOST] === hostname() && Number.isInteger(pid) && pid > 0 && pidExists(pid))
      return true;
    if (this.o.isOwnerAlive) return this.o.isOwnerAlive(owner);
    const st = await stat(this.heartbeatFile(owner)).catch(() => undefined);
    return (
      st !== undefined && Date.now() - st.mtimeMs < 3 * this.o.config.reaper.intervalMs + 10_000
    );
  }
}

function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
