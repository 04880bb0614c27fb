/** The docker driver's pool and reaper against a real Docker engine (skipped with the reason when none). */
import { chmod, mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DockerDriver,
  LABEL,
  LABEL_CREATED,
  LABEL_HOST,
  LABEL_IMAGE,
  LABEL_OWNER,
  LABEL_DEPLOYMENT,
  LABEL_PID,
  ownComposeProject,
} from './docker.js';
import { testSandboxConfig, whyDriverUnavailable } from './testing.js';

const unavailable = await whyDriverUnavailable('docker');
if (unavailable) console.warn(`docker driver tests skipped: ${unavailable}`);

describe.skipIf(unavailable !== undefined)('DockerDriver', () => {
  const docker = new Docker();
  let dir: string;
  let driver: DockerDriver;

  const leftover = (owner: string, createdAt = Date.now(), extra: Record<string, string> = {}) =>
    docker
      .createContainer({
        Image: 'toolgate/sandbox-shell:local',
        Entrypoint: ['sleep', '300'],
        Labels: {
          [LABEL]: '1',
          [LABEL_OWNER]: owner,
          [LABEL_CREATED]: String(createdAt),
          [LABEL_IMAGE]: 'shell',
          [LABEL_DEPLOYMENT]: driver.deploymentId,
          ...extra,
        },
        HostConfig: { NetworkMode: 'none' },
      })
      .then(async (c) => (await c.start(), c.id));
  const exists = (id: string) =>
    docker
      .getContainer(id)
      .inspect()
      .then(
        () => true,
        () => false,
      );

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-docker-'));
    await chmod(dir, 0o711);
    driver = new DockerDriver(
      testSandboxConfig('docker', dir, { pool: { size: 1 }, reaper: { maxAgeMs: 600_000 } }),
    );
    await driver.warmUp();
  });
  afterAll(async () => {
    await driver?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('runs each call in a fresh pre-started container, used once', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      await driver.warmUp();
      const r = await driver.run({ image: 'shell', argv: ['cat', '/proc/self/cgroup'] });
      expect(r.warm).toBe(true);
      ids.push(/([0-9a-f]{64})/.exec(r.stdout)![1]!);
    }
    expect(ids[0]).not.toBe(ids[1]);
  });

  it('serves a call whose pool is empty by waiting for the next container', async () => {
    const results = await Promise.all(
      [1, 2, 3].map((n) => driver.run({ image: 'python', argv: ['python3', '-c', `print(${n})`] })),
    );
    expect(results.map((r) => r.stdout)).toEqual(['1\n', '2\n', '3\n']);
  });

  // Other drivers (other test files, with other state dirs) reap concurrently: assert outcomes, not counts.
  it('reaps containers of a dead worker, and keeps a live one', async () => {
    const owners = path.join(dir, 'state/owners');
    await mkdir(owners, { recursive: true });
    await writeFile(path.join(owners, 'dead-worker'), '1');
    const old = new Date(Date.now() - 3_600_000);
    await utimes(path.join(owners, 'dead-worker'), old, old);
    const self = { [LABEL_HOST]: hostname(), [LABEL_PID]: String(process.pid) };
    const dead = await leftover('dead-worker');
    const unknown = await leftover('never-heard-of');
    const exited = await leftover('exited-worker', Date.now(), {
      [LABEL_HOST]: hostname(),
      [LABEL_PID]: '999999999',
    });
    const live = await leftover('live-worker', Date.now(), self);
    // Another toolgate on the same engine (another deployment): never touched.
    const foreign = await leftover('dead-worker-elsewhere', Date.now() - 3_600_000, {
      [LABEL_DEPLOYMENT]: 'another-deployment',
    });
    const ancient = await leftover('live-worker', Date.now() - 3_600_000, self);

    await driver.reap();
    // A removal another worker's reaper started may still be finishing.
    for (
      let i = 0;
      i < 50 && (await Promise.all([dead, unknown, exited, ancient].map(exists))).some(Boolean);
      i++
    ) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const after = {
      dead: await exists(dead),
      unknown: await exists(unknown),
      exited: await exists(exited),
      ancient: await exists(ancient),
    };
    expect(after).toEqual({ dead: false, unknown: false, exited: false, ancient: false });
    expect(await exists(live)).toBe(true);
    expect(await exists(foreign)).toBe(true);
    await docker.getContainer(live).remove({ force: true });
    await docker.getContainer(foreign).remove({ force: true });
  });

  it('removes every container it owns on close', async () => {
    const other = new DockerDriver(testSandboxConfig('docker', dir, { pool: { size: 2 } }));
    await other.warmUp();
    const owned = () =>
      docker
        .listContainers({ all: true, filters: { label: [`${LABEL_OWNER}=${other.ownerId}`] } })
        .then((l) => l.length);
    expect(await owned()).toBe(4);
    await other.close();
    expect(await owned()).toBe(0);
  });

  it('drainWarm removes the warm pool at once; calls still run, each in a container of its own', async () => {
    const other = new DockerDriver(testSandboxConfig('docker', dir, { pool: { size: 2 } }));
    await other.warmUp();
    const owned = () =>
      docker
        .listContainers({ all: true, filters: { label: [`${LABEL_OWNER}=${other.ownerId}`] } })
        .then((l) => l.length);
    expect(await owned()).toBe(4);
    await other.drainWarm();
    expect(await owned()).toBe(0);
    const r = await other.run({ image: 'shell', argv: ['echo', 'after drain'] });
    expect(r).toMatchObject({ stdout: 'after drain\n', exitCode: 0, warm: false });
    // Nothing warm again after the call: a stopping worker keeps none.
    await new Promise((res) => setTimeout(res, 500));
    expect(await owned()).toBe(0);
    expect(other.stats().warm).toEqual({ python: 0, shell: 0, node: 0 });
    await other.close();
  });

  it('finds the compose project of the container a worker runs in', async () => {
    const project = `tgproj${Date.now().toString(36)}`;
    const c = await docker.createContainer({
      Image: 'toolgate/sandbox-shell:local',
      Entrypoint: ['sleep', '60'],
      Labels: { 'com.docker.compose.project': project },
      HostConfig: { NetworkMode: 'none' },
    });
    try {
      // What /proc/self/mountinfo shows inside a container: the engine's per-container files.
      const mountinfo = `1 2 0:1 /var/lib/docker/containers/${c.id}/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n`;
      expect(await ownComposeProject(docker, mountinfo)).toBe(project);
      // On the host (no such mount, and no container named after the host): none.
      expect(await ownComposeProject(docker, '')).toBeUndefined();
    } finally {
      await c.remove({ force: true });
    }
  });
});
