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

  it("runs run_python's program in the warm container's pre-started interpreter, as `python3 -u -` would", async () => {
    const workspace = path.join(dir, 'ws-preload');
    await mkdir(workspace, { recursive: true });
    await chmod(workspace, 0o777);
    await writeFile(path.join(workspace, 'data.txt'), 'from the workspace');
    await writeFile(path.join(workspace, 'helper.py'), 'VALUE = 42\n');
    const python = async (code: string) => {
      await driver.warmUp();
      const r = await driver.run({
        image: 'python',
        argv: ['python3', '-u', '-'],
        stdin: code,
        workspace,
      });
      expect(r.warm).toBe(true);
      return r;
    };
    const facts = await python(
      [
        'import json, os, sys',
        'import helper',
        'print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "name": __name__,',
        '  "file": "__file__" in globals(), "env": "TOOLGATE_PRELOAD" in os.environ,',
        '  "data": open("data.txt").read(), "helper": helper.VALUE, "path0": sys.path[0],',
        '  "globals": sorted(k for k in globals() if not k.startswith("__")),',
        '  "preloaded": "preload.py" in open("/proc/self/cmdline").read()}))',
      ].join('\n'),
    );
    expect(facts.exitCode).toBe(0);
    expect(JSON.parse(facts.stdout)).toEqual({
      argv: ['-'],
      cwd: '/workspace',
      name: '__main__',
      file: false,
      env: false,
      data: 'from the workspace',
      helper: 42,
      path0: '',
      globals: ['helper', 'json', 'os', 'sys'],
      preloaded: true,
    });

    // An uncaught exception: the traceback a model reads is the program's own, status 1.
    const failed = await python('def f():\n    return 1 / 0\n\nf()\n');
    expect(failed.exitCode).toBe(1);
    expect(failed.stderr).toContain('Traceback (most recent call last):');
    expect(failed.stderr).toContain('File "<stdin>", line 2, in f');
    expect(failed.stderr).toContain('ZeroDivisionError: division by zero');
    expect(failed.stderr).not.toContain('preload');
    expect(failed.stderr).not.toContain('<string>');
    expect((await python('import sys\nprint("bye")\nsys.exit(3)\n')).exitCode).toBe(3);
    const syntax = await python('print(\n');
    expect(syntax.exitCode).toBe(1);
    expect(syntax.stderr).toContain('File "<stdin>", line 1');
    expect(syntax.stderr).toContain('SyntaxError');

    // Any other program on a warm python container runs as before (the interpreter is dropped).
    const other = await python('unused');
    expect(other.exitCode).toBe(1); // `unused` is a NameError: still the preloaded path
    await driver.warmUp();
    const plain = await driver.run({
      image: 'python',
      argv: ['python3', '-c', 'import sys; print(sys.argv)'],
    });
    expect(plain.stdout).toBe("['-c']\n");
    // ...with the signals it would have anyway: a pipe's reader leaving ends the writer quietly.
    await driver.warmUp();
    const piped = await driver.run({ image: 'python', argv: ['bash', '-c', 'yes | head -n 1'] });
    expect(piped).toMatchObject({ exitCode: 0, stdout: 'y\n', stderr: '' });
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
