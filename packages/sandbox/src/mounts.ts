/**
 * Host mounts behind the docker driver's shared warm pool. Each pooled container gets its own
 * empty "slot" directory bind-mounted at /workspace with rslave propagation; when a call takes
 * the container, the client's workspace is bind-mounted onto the slot on the host and appears
 * inside that one container only. Needs root on the host (the worker already has the Docker
 * socket, which is root-equivalent) and a shared mount at <stateDir>/slots.
 */
import { execFile } from 'node:child_process';
import { mkdir, readFile, readdir, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { HostLock } from './host-lock.js';
import { MountHelper } from './mount-helper.js';

const run = promisify(execFile);

/** Mount points from /proc/self/mountinfo, with their propagation tags. */
export async function mountTable(): Promise<{ target: string; shared: boolean; source: string }[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const fields = line.split(' ');
      const sep = fields.indexOf('-');
      const optional = fields.slice(6, sep);
      return {
        target: unescape(fields[4] ?? ''),
        shared: optional.some((f) => f.startsWith('shared:')),
        source: unescape(fields[sep + 2] ?? ''),
      };
    });
}

// mountinfo escapes space, tab, newline and backslash as octal.
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

export class SlotMounts {
  readonly slotsDir: string;
  /** Every worker of the host (same stateDir) sets up and tears down under this lock. */
  readonly lock: HostLock;
  /** Runs the per-call mount and unmount (bind, unmountBelow): see mount-helper.ts. */
  private readonly helper = new MountHelper();

  constructor(stateDir: string) {
    this.slotsDir = path.join(path.resolve(stateDir), 'slots');
    this.lock = new HostLock(hostLockFile(stateDir));
  }

  /**
   * Makes <stateDir>/slots a shared mount so binds below it propagate into containers, and
   * registers `owner` (its slot directory) in the same step so a worker leaving at that moment
   * does not tear the mount down under it. Returns false (and the driver falls back to per-call
   * containers for workspace calls) when that is impossible here, e.g. when not root.
   *
   * Under the host lock: two workers checking and binding at once would stack two mounts on
   * slots, one of them private, and Docker then refuses every slot bind ("not a shared or slave
   * mount"). A stack left by an older version or a crash is repaired here: anything but exactly
   * one shared mount is unmounted and made again.
   */
  async setup(owner: string): Promise<boolean> {
    if (process.getuid?.() !== 0) return false;
    try {
      return await this.lock.with(async () => {
        await mkdir(this.slotsDir, { recursive: true, mode: 0o755 });
        let own = (await mountTable()).filter((m) => m.target === this.slotsDir);
        if (own.length > 1 || (own.length === 1 && !own[0]!.shared)) {
          // Broken: no slot in it can have worked, so nothing in use is lost by starting over.
          for (let i = 0; i < own.length + 2 && own.length > 0; i++) {
            await run('umount', ['-l', this.slotsDir]).catch(() => undefined);
            own = (await mountTable()).filter((m) => m.target === this.slotsDir);
          }
          if (own.length > 0) return false;
        }
        if (own.length === 0) {
          await run('mount', ['--bind', this.slotsDir, this.slotsDir]);
          await run('mount', ['--make-rshared', this.slotsDir]);
        }
        await mkdir(this.ownerDir(owner), { recursive: true, mode: 0o755 });
        return true;
      });
    } catch {
      return false;
    }
  }

  /** Whether <stateDir>/slots is exactly one shared mount (what Docker needs). */
  async healthy(): Promise<boolean> {
    const own = (await mountTable()).filter((m) => m.target === this.slotsDir);
    return own.length === 1 && own[0]!.shared;
  }

  ownerDir(owner: string): string {
    return path.join(this.slotsDir, owner);
  }

  async createSlot(owner: string, name: string): Promise<string> {
    const dir = path.join(this.ownerDir(owner), name);
    await mkdir(dir, { recursive: true, mode: 0o755 });
    return dir;
  }

  async bind(source: string, slot: string): Promise<void> {
    // No nosuid/nodev remount (a second exec on the call path): with no-new-privileges and no
    // capabilities, set-uid files and device nodes in the workspace give nothing.
    await this.helper.bind(source, slot);
  }

  /** Unmounts whatever is bound on the slot and removes it. */
  async releaseSlot(slot: string): Promise<void> {
    await this.unmountBelow(slot);
    await rmdir(slot).catch(() => undefined);
  }

  /** Unmounts everything at or below dir (deepest first), lazily so a busy mount cannot stall us. */
  async unmountBelow(dir: string): Promise<void> {
    const table = await mountTable().catch(() => []);
    const targets = table
      .map((m) => m.target)
      .filter((t) => t === dir || t.startsWith(dir + '/'))
      .sort((a, b) => b.length - a.length);
    for (const t of targets) await this.helper.unmount(t).catch(() => undefined);
  }

  /** Ends the mount helper (the driver is closing); a later call starts it again. */
  close(): void {
    this.helper.close();
  }

  /** Owners that have a slot directory (for the reaper). */
  async owners(): Promise<string[]> {
    return readdir(this.slotsDir).catch(() => []);
  }

  /** Undoes setup() when no worker has slots left (the last one out unmounts). */
  async teardownIfUnused(): Promise<void> {
    await this.lock
      .with(async () => {
        if ((await this.owners()).length > 0) return;
        await run('umount', ['-l', this.slotsDir]).catch(() => undefined);
      })
      .catch(() => undefined);
  }

  async removeOwner(owner: string): Promise<void> {
    const dir = this.ownerDir(owner);
    await this.unmountBelow(dir);
    // rmdir, never rm -r: if an unmount failed, a slot still shows a client's files.
    for (const slot of await readdir(dir).catch(() => []))
      await rmdir(path.join(dir, slot)).catch(() => undefined);
    await rmdir(dir).catch(() => undefined);
  }
}

/** The one lock file of a host's toolgate (per stateDir): slot setup and workspace mounts. */
export function hostLockFile(stateDir: string): string {
  return path.join(path.resolve(stateDir), 'host.lock');
}
