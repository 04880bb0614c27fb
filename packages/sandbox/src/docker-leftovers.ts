/**
 * Sandbox containers of toolgate deployments that no longer exist, on one Docker engine: what
 * `toolgate doctor` reports and `toolgate sandbox prune` removes. A worker's own reaper only
 * touches its deployment's containers (docker-reaper.ts), so a deployment that is gone for good
 * (`docker compose down`, a deleted checkout) leaves its leftovers to this.
 */
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import Docker from 'dockerode';
import {
  LABEL,
  LABEL_CREATED,
  LABEL_DEPLOYMENT,
  LABEL_HOST,
  LABEL_IMAGE,
  LABEL_PID,
} from './docker-reaper.js';

/** A client of the engine on `socketPath` (what `toolgate doctor` and `sandbox prune` ask). */
export function dockerEngine(socketPath: string): Docker {
  return new Docker({ socketPath, timeout: 10_000 });
}

/** The compose project of the worker that made a sandbox, when it ran under Compose. */
export const LABEL_COMPOSE_PROJECT = 'toolgate.compose-project';
/** The label Compose puts on each container of a project. */
const COMPOSE_PROJECT = 'com.docker.compose.project';

/** A container that is not running and was made this long ago is nobody's any more. */
export const STOPPED_LEFTOVER_MS = 10 * 60_000;

/**
 * The compose project of the container this process runs in, if any: its id from the engine's
 * bind mounts in /proc/self/mountinfo (…/containers/<id>/hostname, resolv.conf), else the host
 * name (a container's short id unless `hostname:` is set), then that container's label.
 */
export async function ownComposeProject(
  docker: Docker,
  mountinfo?: string,
): Promise<string | undefined> {
  const text = mountinfo ?? (await readFile('/proc/self/mountinfo', 'utf8').catch(() => ''));
  const candidates = [/\/containers\/([0-9a-f]{64})\//.exec(text)?.[1], hostname()];
  for (const id of candidates) {
    if (!id) continue;
    const info = await docker
      .getContainer(id)
      .inspect()
      .catch(() => undefined);
    if (info) return info.Config.Labels?.[COMPOSE_PROJECT] || undefined;
  }
  return undefined;
}

export interface Leftover {
  id: string;
  name: string;
  /** Docker's state: running, exited, created, … */
  state: string;
  /** Docker's status text: "Exited (125) 3 hours ago". */
  status: string;
  image: string;
  deployment: string;
  composeProject?: string;
  /** Why its deployment is taken for gone. */
  reason: string;
}

function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Every toolgate sandbox container on this engine whose worker is known to be gone: its compose
 * project has no running container left; or it ran on this host and its pid is gone; or it ran
 * in a container (host name = short id) that no longer runs; or it is stopped and older than
 * STOPPED_LEFTOVER_MS. Containers whose worker cannot be judged from here (another host) are
 * left alone: their own deployment's reaper removes them.
 */
export async function findLeftovers(docker: Docker, now = Date.now()): Promise<Leftover[]> {
  const sandboxes = await docker.listContainers({
    all: true,
    filters: { label: [`${LABEL}=1`] },
  });
  const running = await docker.listContainers({ filters: { status: ['running'] } });
  const liveProjects = new Set(
    running
      .filter((c) => c.Labels[LABEL] !== '1')
      .map((c) => c.Labels[COMPOSE_PROJECT])
      .filter((p): p is string => !!p),
  );
  const here = hostname();
  const leftovers: Leftover[] = [];
  for (const c of sandboxes) {
    const labels = c.Labels;
    const project = labels[LABEL_COMPOSE_PROJECT];
    const host = labels[LABEL_HOST] ?? '';
    const pid = Number(labels[LABEL_PID]);
    const age = now - Number(labels[LABEL_CREATED] ?? 0);
    let reason: string | undefined;
    if (project) {
      if (!liveProjects.has(project))
        reason = `compose project "${project}" has no running container`;
    } else if (host === here && Number.isInteger(pid) && pid > 0) {
      if (!pidExists(pid)) reason = `its worker (pid ${pid} on this host) is gone`;
    } else if (/^[0-9a-f]{12}$/.test(host)) {
      if (!running.some((r) => r.Id.startsWith(host)))
        reason = `its worker's container ${host} is not running`;
    }
    if (!reason && c.State !== 'running' && age > STOPPED_LEFTOVER_MS)
      reason = `stopped, made ${Math.round(age / 60_000)} min ago`;
    if (!reason) continue;
    leftovers.push({
      id: c.Id,
      name: (c.Names[0] ?? c.Id.slice(0, 12)).replace(/^\//, ''),
      state: c.State,
      status: c.Status,
      image: labels[LABEL_IMAGE] ?? c.Image,
      deployment: labels[LABEL_DEPLOYMENT] ?? '',
      ...(project ? { composeProject: project } : {}),
      reason,
    });
  }
  return leftovers;
}

/** Removes them (forced: running ones too); resolves with those it could not remove. */
export async function removeLeftovers(
  docker: Docker,
  leftovers: readonly Leftover[],
): Promise<{ leftover: Leftover; error: string }[]> {
  const failed: { leftover: Leftover; error: string }[] = [];
  for (const leftover of leftovers) {
    await docker
      .getContainer(leftover.id)
      .remove({ force: true, v: true })
      .catch((err: { statusCode?: number; message?: string }) => {
        if (err.statusCode !== 404) failed.push({ leftover, error: String(err.message ?? err) });
      });
  }
  return failed;
}
