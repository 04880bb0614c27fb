/**
 * Workspace quotas and retention against both drivers for real: each client's workspace is a
 * loop-mounted filesystem image of a small size here (16 MiB, 300 inodes), so what a user would
 * notice — "No space left on device" inside the sandbox, a normal result, the neighbour and the
 * host unaffected — is checked end to end. Needs root and loop devices (skipped otherwise).
 */
import { execFile } from 'node:child_process';
import {
  chmod,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  stat,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { ToolContext } from '@toolgate/registry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox, createWorkspaces, type Sandbox, type Workspaces } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { fileList, fileWrite, runShell } from '@toolgate/tools';

const exec = promisify(execFile);
const MiB = 1024 * 1024;
const drivers = ['docker', 'bwrap'] as const;

async function whyNoLoopMounts(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'not root';
  return exec('losetup', ['-f']).then(
    () => undefined,
    () => 'no free loop device',
  );
}
const noLoop = await whyNoLoopMounts();
const reasons = Object.fromEntries(
  await Promise.all(
    drivers.map(async (d) => [d, noLoop ?? (await whyDriverUnavailable(d))] as const),
  ),
);
for (const d of drivers)
  if (reasons[d]) console.warn(`workspace quota suite: ${d} skipped: ${reasons[d]}`);

describe.each(drivers)('workspace quota: %s driver', (driver) => {
  const skip = reasons[driver] !== undefined;
  let dir: string;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  let seq = 0;
  const ctx = (clientId: string): ToolContext => ({
    callId: `quota-${driver}-${++seq}`,
    clientId,
    signal: new AbortController().signal,
    services: { sandbox, workspaces },
  });
  const shell = (clientId: string, command: string) => runShell.handler({ command }, ctx(clientId));

  beforeAll(async () => {
    if (skip) return;
    dir = await mkdtemp(path.join(tmpdir(), `tg-quota-${driver}-`));
    await chmod(dir, 0o711);
    sandbox = await createSandbox(
      testSandboxConfig(driver, dir, {
        workspaceQuota: 'required',
        limits: { workspaceMb: 16, workspaceInodes: 300 },
        pool: { size: 2 },
      }),
    );
    workspaces = createWorkspaces(sandbox.config, {
      sizeMbFor: (client) => (client === 'roomy' ? 40 : undefined),
    });
    await sandbox.warmUp();
  }, 120_000);
  afterAll(async () => {
    if (skip) return;
    await sandbox.close();
    await workspaces.unmountAll();
    await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(skip)(
    'a write past the quota fails with ENOSPC in a normal result; the neighbour and the host are unaffected',
    async () => {
      const r = await shell('alice', 'head -c 40M /dev/zero > big.bin');
      expect(r.exitCode).not.toBe(0);
      expect(r.timedOut).toBe(false);
      expect(r.stderr).toMatch(/No space left on device/);
      const size = await shell('alice', 'stat -c %s big.bin');
      expect(Number(size.stdout)).toBeLessThanOrEqual(16 * MiB);
      // The host gave the image no more than its size: the 40 MiB never reached the host disk.
      const image = await stat(path.join(dir, 'workspaces/.images/alice.img'));
      expect(image.blocks * 512).toBeLessThanOrEqual(16 * MiB);
      // Another client's workspace is its own filesystem, still empty and writable.
      const bob = await shell('bob', 'head -c 8M /dev/zero > ok.bin && stat -c %s ok.bin');
      expect(bob).toMatchObject({ exitCode: 0, stdout: `${8 * MiB}\n` });
    },
    60_000,
  );

  it.skipIf(skip)('creating files past the inode limit fails the same way', async () => {
    const r = await shell(
      'carol',
      'for i in $(seq 1000); do : > "f$i" || { echo "stopped at $i"; exit 3; }; done',
    );
    expect(r.exitCode).toBe(3);
    expect(r.stderr).toMatch(/No space left on device/);
    const stopped = Number(/stopped at (\d+)/.exec(r.stdout)?.[1]);
    expect(stopped).toBeGreaterThan(100);
    expect(stopped).toBeLessThan(400);
  });

  it.skipIf(skip)(
    'the quota holds across calls: data persists, the total stays capped',
    async () => {
      expect(await shell('dave', 'head -c 10M /dev/zero > a.bin')).toMatchObject({ exitCode: 0 });
      const second = await shell('dave', 'head -c 10M /dev/zero > b.bin');
      expect(second.exitCode).not.toBe(0);
      expect(second.stderr).toMatch(/No space left on device/);
      // The file tools see the same filesystem and the same limit.
      const listed = await fileList.handler({}, ctx('dave'));
      expect(listed.entries.find((e) => e.name === 'a.bin')?.size).toBe(10 * MiB);
      await expect(
        fileWrite.handler({ path: 'c.txt', content: 'x'.repeat(900_000) }, ctx('dave')),
      ).rejects.toMatchObject({ code: 'no_space', message: 'the workspace is full' });
    },
  );

  it.skipIf(skip)('a per-client size overrides the default', async () => {
    const r = await shell('roomy', 'head -c 30M /dev/zero > big.bin && stat -c %s big.bin');
    expect(r).toMatchObject({ exitCode: 0, stdout: `${30 * MiB}\n` });
  });
});

describe.skipIf(noLoop !== undefined)('workspace retention', () => {
  it('deletes workspaces unused past workspaceTtlDays and keeps fresh ones', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'tg-retention-'));
    const config = testSandboxConfig('bwrap', dir, {
      workspaceQuota: 'required',
      workspaceTtlDays: 7,
      limits: { workspaceMb: 8, workspaceInodes: 128 },
    });
    const workspaces = createWorkspaces(config);
    try {
      for (const client of ['old', 'fresh']) await workspaces.ensure(client);
      const markers = path.join(config.workspacesRoot, '.markers');
      const tenDaysAgo = new Date(Date.now() - 10 * 86_400_000);
      await utimes(path.join(markers, 'old'), tenDaysAgo, tenDaysAgo);

      expect(await workspaces.reap()).toEqual({ expired: 1, reset: 0 });
      const left = await readdir(config.workspacesRoot);
      expect(left).toContain('fresh');
      expect(left).not.toContain('old');
      expect(await readdir(path.join(config.workspacesRoot, '.images'))).toEqual(['fresh.img']);
      const { stdout } = await exec('findmnt', ['-rn', '-o', 'TARGET']);
      expect(stdout).not.toContain(path.join(config.workspacesRoot, 'old'));
      expect(stdout).toContain(path.join(config.workspacesRoot, 'fresh'));

      // Used again after being deleted: a fresh, empty workspace.
      const again = await workspaces.ensure('old');
      expect(await readdir(again)).toEqual([]);
    } finally {
      await workspaces.unmountAll();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a workspace from before quotas keeps its files, moved into its new filesystem', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'tg-migrate-'));
    const config = testSandboxConfig('bwrap', dir, {
      workspaceQuota: 'required',
      limits: { workspaceMb: 8, workspaceInodes: 128 },
    });
    const legacy = path.join(config.workspacesRoot, 'alice');
    await mkdir(path.join(legacy, 'notes'), { recursive: true });
    await writeFile(path.join(legacy, 'notes/a.txt'), 'kept');
    const workspaces = createWorkspaces(config);
    try {
      const ws = await workspaces.ensure('alice');
      expect(await readFile(path.join(ws, 'notes/a.txt'), 'utf8')).toBe('kept');
      const { stdout } = await exec('findmnt', ['-n', '-o', 'SOURCE', ws]);
      expect(stdout).toMatch(/\/dev\/loop/);
      // The host copy is gone (not hidden under the mount, taking space).
      await workspaces.unmountAll();
      expect(await readdir(legacy)).toEqual([]);
    } finally {
      await workspaces.unmountAll();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a raised quota grows an existing workspace (online, or offline when unused), keeping its files', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'tg-grow-'));
    const config = testSandboxConfig('bwrap', dir, {
      workspaceQuota: 'required',
      limits: { workspaceMb: 8, workspaceInodes: 128 },
    });
    const small = createWorkspaces(config);
    const size = async (ws: string) =>
      Number((await exec('df', ['--output=size', '-B1M', ws])).stdout.split('\n')[1]);
    try {
      const ws = await small.ensure('alice');
      await writeFile(path.join(ws, 'a.txt'), 'kept');
      expect(await size(ws)).toBeLessThanOrEqual(8);
      // Another process (a restarted worker) with a larger quota for this client.
      const larger = createWorkspaces(config, { sizeMbFor: () => 24 });
      await larger.ensure('alice');
      expect(await size(ws)).toBeGreaterThan(16);
      expect(await readFile(path.join(ws, 'a.txt'), 'utf8')).toBe('kept');
    } finally {
      await small.unmountAll();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
