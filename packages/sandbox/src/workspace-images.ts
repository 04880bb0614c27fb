/**
 * Workspace quotas: each client's workspace is a sparse ext4 image of its own, loop-mounted on
 * the workspace directory and left mounted for later calls. Its size and inode count are the
 * quota, enforced by the kernel: a write past them fails with ENOSPC inside the sandbox, and
 * the host filesystem only ever gives the image what it was sized for. Both drivers bind the
 * directory as before and see the mounted filesystem. Callers hold the host lock.
 */
import { execFile } from 'node:child_process';
import { mkdir, readdir, rm, rmdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { mountTable } from './mounts.js';

const run = promisify(execFile);
const MiB = 1024 * 1024;
/** The sandbox user (workspaces.ts re-exports these; kept here to avoid an import cycle). */
const OWNER = '10001:10001';

export interface QuotaSize {
  mb: number;
  inodes: number;
}

export class WorkspaceImages {
  constructor(readonly imagesDir: string) {}

  imageFor(dir: string): string {
    return path.join(this.imagesDir, `${path.basename(dir)}.img`);
  }

  /** The loop device mounted on dir, if any (the topmost mount). */
  async mountedDevice(dir: string): Promise<string | undefined> {
    const table = await mountTable();
    return table.filter((m) => m.target === dir).at(-1)?.source;
  }

  /**
   * Mounts dir's image on dir, creating it first if needed (from dir's current contents when
   * there are any, so a workspace made before quotas keeps its files), and grows it to `size`
   * when the configured quota is larger than the image. Shrinking is not supported: a smaller
   * quota applies to workspaces created afterwards.
   */
  async mount(dir: string, size: QuotaSize): Promise<void> {
    let created = false;
    await mkdir(this.imagesDir, { recursive: true, mode: 0o700 });
    const image = this.imageFor(dir);
    let device = await this.mountedDevice(dir);
    if (!device) {
      const exists = await stat(image).then(
        () => true,
        () => false,
      );
      if (!exists) created = await this.create(dir, image, size);
      await run('mount', ['-t', 'ext4', '-o', 'loop,nosuid,nodev', image, dir]);
      device = await this.mountedDevice(dir);
      // The model should see an empty workspace, not ext4's lost+found.
      if (created) await rmdir(path.join(dir, 'lost+found')).catch(() => undefined);
    }
    const st = await stat(image);
    if (device && st.size < size.mb * MiB) {
      // Online: grow the file, tell the loop device, then the filesystem.
      await run('truncate', ['-s', `${size.mb}M`, image]);
      await run('losetup', ['-c', device]);
      await run('resize2fs', [device]);
    }
  }

  /** Makes the image; true when the workspace was empty (a fresh filesystem). */
  private async create(dir: string, image: string, size: QuotaSize): Promise<boolean> {
    const old = await readdir(dir).catch(() => []);
    await rm(image, { force: true });
    await run('truncate', ['-s', `${size.mb}M`, image]);
    try {
      await run('mkfs.ext4', [
        '-q',
        '-F',
        // No blocks reserved for root: the whole quota is the client's.
        '-m',
        '0',
        '-N',
        String(size.inodes),
        '-E',
        `root_owner=${OWNER}`,
        // Carry over what a workspace from before quotas held (fails if it does not fit).
        ...(old.length > 0 ? ['-d', dir] : []),
        image,
      ]);
    } catch (err) {
      await rm(image, { force: true });
      throw err;
    }
    // Copied into the image: the host copy would only take disk space under the mount.
    for (const name of old) await rm(path.join(dir, name), { recursive: true, force: true });
    return old.length === 0;
  }

  /** Unmounts dir (lazily: a call still running keeps its view until it ends). */
  async unmount(dir: string): Promise<void> {
    for (let i = 0; i < 8 && (await this.mountedDevice(dir)); i++)
      await run('umount', ['-l', dir]).catch(() => undefined);
  }

  async removeImage(dir: string): Promise<void> {
    await rm(this.imageFor(dir), { force: true });
  }
}
