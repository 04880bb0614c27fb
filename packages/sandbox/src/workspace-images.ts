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
  async mount(dir: string, size: QuotaSize): Promise<{ growError?: string }> {
    await mkdir(this.imagesDir, { recursive: true, mode: 0o700 });
    const image = this.imageFor(dir);
    let device = await this.mountedDevice(dir);
    if (!device) {
      const exists = await stat(image).then(
        () => true,
        () => false,
      );
      if (exists) await mountImage(image, dir);
      else await this.createAndMount(dir, image, size);
      device = await this.mountedDevice(dir);
    }
    const st = await stat(image);
    if (!device || st.size >= size.mb * MiB) return {};
    try {
      await this.grow(dir, image, device, size.mb);
      return {};
    } catch (err) {
      // The workspace keeps working at its old size; the next worker start tries again.
      if (!(await this.mountedDevice(dir))) await mountImage(image, dir);
      return { growError: (err as Error).message };
    }
  }

  /**
   * Online (grow the file, tell the loop device, then the filesystem); that needs
   * CAP_SYS_RESOURCE. Without it, offline, but only when nothing else holds the image (no
   * call or warm-pool slot still has it mounted): unmount, check, resize, mount again.
   */
  private async grow(dir: string, image: string, device: string, mb: number): Promise<void> {
    await run('truncate', ['-s', `${mb}M`, image]);
    await run('losetup', ['-c', device]);
    try {
      await run('resize2fs', [device]);
      return;
    } catch {
      // Fall through to offline.
    }
    await run('umount', [dir]);
    // The kernel detaches an autoclear loop device shortly after the last unmount, not at once.
    let attached = true;
    for (let i = 0; i < 40 && attached; i++) {
      attached = (await run('losetup', ['-j', image])).stdout.trim() !== '';
      if (attached) await new Promise((r) => setTimeout(r, 50));
    }
    if (attached) {
      await mountImage(image, dir);
      throw new Error('the image is in use elsewhere; it grows at a later start');
    }
    // e2fsck -p exits 1 when it fixed something, which is fine; resize2fs wants a checked fs.
    await run('e2fsck', ['-f', '-p', image]).catch((err: { code?: number }) => {
      if (err.code !== 1) throw err;
    });
    await run('resize2fs', [image]);
    await mountImage(image, dir);
  }

  private async createAndMount(dir: string, image: string, size: QuotaSize): Promise<void> {
    const old = await readdir(dir).catch(() => []);
    await rm(image, { force: true });
    let moved = false;
    try {
      await run('truncate', ['-s', `${size.mb}M`, image]);
      await run('mkfs.ext4', [
        '-q',
        '-F',
        // No blocks reserved for root: the whole quota is the client's.
        '-m',
        '0',
        // At most one inode per 4 KiB: more inode tables than that would not fit the image.
        '-N',
        String(Math.min(size.inodes, (size.mb * MiB) / 4096)),
        // A journal of 8 MiB instead of ext4's default (32 MiB at 1 GiB): it is written out
        // in full at mkfs, so it is what an empty workspace costs the host.
        ...(size.mb >= 256 ? ['-J', 'size=8'] : []),
        '-E',
        `root_owner=${OWNER}`,
        // Carry over what a workspace from before quotas held (fails if it does not fit).
        ...(old.length > 0 ? ['-d', dir] : []),
        image,
      ]);
      if (old.length > 0) {
        // The copy is in the image; the host copy would only take disk space hidden under the
        // mount. Drop it only once a trial mount has shown this host can mount the image.
        const trial = `${image}.mnt`;
        await mkdir(trial, { recursive: true, mode: 0o700 });
        await mountImage(image, trial);
        await run('umount', [trial]);
        await rmdir(trial).catch(() => undefined);
        moved = true;
        for (const name of old) await rm(path.join(dir, name), { recursive: true, force: true });
      }
      await mountImage(image, dir);
    } catch (err) {
      // Nothing half-made stays behind: the next attempt (or the fallback) starts clean. Once
      // the files have moved into the image it is their only copy, and the next attempt mounts it.
      if (!moved) await rm(image, { force: true });
      throw err;
    }
    // The model should see an empty workspace, not ext4's lost+found.
    if (old.length === 0) await rmdir(path.join(dir, 'lost+found')).catch(() => undefined);
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

function mountImage(image: string, dir: string): Promise<unknown> {
  return run('mount', ['-t', 'ext4', '-o', 'loop,nosuid,nodev', image, dir]);
}
