/**
 * Per-client workspaces on the host: `<root>/<sanitized clientId>`, mounted read-write at
 * /workspace in that client's sandboxes and nowhere else. With quotas on, each is a filesystem
 * image of its own mounted there (workspace-images.ts). Also retention (unused workspaces and
 * admin resets are deleted) and the host-side half of the file tools' path confinement (the
 * in-sandbox half runs inside the container).
 */
import { createHash } from 'node:crypto';
import {
  chown,
  lstat,
  mkdir,
  readFile,
  readlink,
  readdir,
  realpath,
  chmod,
  rm,
  stat,
  utimes,
  writeFile,
} from 'node:fs/promises';
import path from 'node:path';
import { SandboxError } from './errors.js';
import { HostLock } from './host-lock.js';
import type { SandboxLogger } from './types.js';
import { WorkspaceImages, type QuotaSize } from './workspace-images.js';

/** uid/gid of the `sandbox` user baked into the images (deploy/sandbox/common/Dockerfile). */
export const SANDBOX_UID = 10001;
export const SANDBOX_GID = 10001;
export const WORKSPACE_MOUNT = '/workspace';
/** Links followed in one path before giving up, as the kernel does (ELOOP at 40). */
const MAX_LINKS = 40;

export type PathErrorReason = 'absolute' | 'escapes' | 'symlink_outside' | 'invalid';

/** Thrown by Workspaces.resolve; tools turn it into ToolError `invalid_path`. */
export class WorkspacePathError extends Error {
  readonly code = 'invalid_path';
  readonly reason: PathErrorReason;

  constructor(reason: PathErrorReason, message: string) {
    super(message);
    this.name = 'WorkspacePathError';
    this.reason = reason;
  }
}

export interface ResolvedPath {
  /** Normalized path relative to the workspace ('' = the workspace itself). */
  relative: string;
  /** The same path as the sandbox sees it, under /workspace. */
  sandboxPath: string;
  /** Real host path, symlinks resolved (of the deepest part that exists). */
  hostPath: string;
  exists: boolean;
}

/**
 * Admin resets, as the worker reads them (from Redis; see @toolgate/calls WorkspaceResets):
 * per client the id of its last reset, new and unique at each reset. A workspace made under any
 * other id is deleted before its next use — compared for difference, not order, so a Redis that
 * forgot its ids (and counts again from 0) can never make a later reset look old.
 */
export interface WorkspaceResetSource {
  /** The id a workspace (a client's, or `<client>@<user>`) is compared with; null: none known. */
  current(name: string): Promise<string | null>;
  /** Every reset id Redis holds, for the reaper. */
  all(): Promise<Map<string, string>>;
  /**
   * `current` read from all()'s map (a user's workspace also follows its client's resets);
   * absent: each workspace is compared with its own name's id only.
   */
  idIn?(all: ReadonlyMap<string, string>, name: string): string | null;
}

export interface WorkspaceOptions {
  /** off: plain directories. auto: quota where this host can loop-mount. required: or refuse. */
  quota?: 'auto' | 'required' | 'off';
  /** Default size of a workspace (sandbox.limits.workspaceMb / workspaceInodes). */
  size?: QuotaSize;
  /** Per-client size override, MiB (clients[].limits.workspaceMb). */
  sizeMbFor?: (clientId: string) => number | undefined;
  /** The host lock every mount change takes (the docker driver's slot setup shares it). */
  lockFile?: string;
  /** Delete workspaces unused this long; 0 or absent = keep. */
  ttlDays?: number;
  /** A workspace used this recently may have a call running in it: the reaper leaves it. */
  busyMs?: number;
  resets?: WorkspaceResetSource;
  logger?: SandboxLogger;
}

/** What is kept about a workspace, outside it (the sandbox cannot write it). */
interface Marker {
  client: string;
  created: number;
  /**
   * The reset id it was made under: '' before any reset; null: unknown then (Redis
   * unreachable). Markers of earlier versions hold a numeric `generation` instead (madeUnder).
   */
  reset?: string | null;
  generation?: number | null;
}

/**
 * The reset a marker's workspace was made under. No marker (a workspace from before markers)
 * or generation 0: none (''); an earlier version's generation n is the id n, which is what that
 * version left in Redis too.
 */
function madeUnder(marker: Marker | undefined): string | null {
  if (!marker) return '';
  if (marker.reset !== undefined) return marker.reset;
  if (marker.generation === null) return null;
  return marker.generation ? String(marker.generation) : '';
}

/** A reset is pending: one is known, and the workspace was made under another (known) one. */
function resetPending(made: string | null, current: string | null | undefined): boolean {
  return made !== null && current !== undefined && current !== null && made !== current;
}

const DAY_MS = 86_400_000;
/** Host-side bookkeeping under the root; client directory names never start with a dot. */
const IMAGES = '.images';
const MARKERS = '.markers';

export class Workspaces {
  readonly root: string;
  private readonly options: WorkspaceOptions;
  /** Prepared this process: directory → the reset it was made under (null: unknown). */
  private readonly known = new Map<string, string | null>();
  private readonly preparing = new Map<string, Promise<void>>();
  private readonly images: WorkspaceImages;
  private readonly lock: HostLock;
  /** Quota mode after the first attempt (auto may fall back to 'off' once). */
  private mode: 'auto' | 'required' | 'off';
  private mountedOnce = false;
  private rootDev: number | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(root: string, options: WorkspaceOptions = {}) {
    this.root = path.resolve(root);
    this.options = options;
    this.mode = options.quota ?? 'off';
    if (this.mode !== 'off' && !options.size) this.mode = 'off';
    this.images = new WorkspaceImages(path.join(this.root, IMAGES));
    this.lock = new HostLock(options.lockFile ?? path.join(this.root, '.lock'));
  }

  /** Whether workspaces are size-limited in this process (false after an `auto` fallback). */
  get quotaEnforced(): boolean {
    return this.mode !== 'off';
  }

  /**
   * Directory name for a client: ids made of [A-Za-z0-9_-] (≤ 64) map to themselves; anything
   * else is sanitized and suffixed with a hash of the raw id, so two ids never share a directory.
   */
  static dirName(clientId: string): string {
    if (/^[A-Za-z0-9_-]{1,64}$/.test(clientId)) return clientId;
    const safe = clientId.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 48);
    const hash = createHash('sha256').update(clientId).digest('hex').slice(0, 12);
    return `${safe || 'client'}-${hash}`;
  }

  pathFor(clientId: string): string {
    return path.join(this.root, Workspaces.dirName(clientId));
  }

  private markerFile(dir: string): string {
    return path.join(this.root, MARKERS, path.basename(dir));
  }

  private sizeFor(clientId: string): QuotaSize {
    const base = this.options.size!;
    return { mb: this.options.sizeMbFor?.(clientId) ?? base.mb, inodes: base.inodes };
  }

  /**
   * Creates the client's workspace if needed (owned by the sandbox user; its own filesystem
   * when quotas are on), applies a pending admin reset, marks it used, and returns its path.
   * Call it for every call that uses the workspace: the mark is what retention goes by.
   */
  async ensure(clientId: string): Promise<string> {
    const dir = this.pathFor(clientId);
    // Redis unreachable: the reset is unknown (undefined) and none is applied now.
    const current = await Promise.resolve(this.options.resets?.current(clientId) ?? null).catch(
      (err: unknown) => {
        this.options.logger?.warn({ err }, 'workspace reset id unreadable');
        return undefined;
      },
    );
    // Checked once per process; a workspace deleted or unmounted behind our back is prepared again.
    const seen = this.known.get(dir);
    if (
      seen !== undefined &&
      !resetPending(seen, current) &&
      // Made while the reset was unknown: prepare() adopts the one known now.
      (seen !== null || current === undefined) &&
      (await this.stillThere(dir))
    ) {
      await this.touch(dir);
      return dir;
    }
    this.known.delete(dir);
    let pending = this.preparing.get(dir);
    if (!pending) {
      pending = this.lock
        .with(() => this.prepare(clientId, dir, current))
        .finally(() => this.preparing.delete(dir));
      this.preparing.set(dir, pending);
    }
    await pending;
    return dir;
  }

  /** The directory exists and, with quotas, still has a filesystem of its own mounted. */
  private async stillThere(dir: string): Promise<boolean> {
    const st = await lstat(dir).catch(() => undefined);
    if (!st?.isDirectory()) return false;
    return this.mode === 'off' || st.dev !== this.rootDev;
  }

  private async touch(dir: string): Promise<void> {
    const now = new Date();
    await utimes(this.markerFile(dir), now, now).catch(() => undefined);
  }

  private async readMarker(dir: string): Promise<Marker | undefined> {
    try {
      return JSON.parse(await readFile(this.markerFile(dir), 'utf8')) as Marker;
    } catch {
      return undefined;
    }
  }

  /** Under the host lock: reset if asked, create, mount, mark. */
  private async prepare(
    clientId: string,
    dir: string,
    current: string | null | undefined,
  ): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o711 });
    await mkdir(path.join(this.root, MARKERS), { recursive: true, mode: 0o700 });
    this.rootDev ??= (await stat(this.root)).dev;
    let marker = await this.readMarker(dir);
    const exists = await lstat(dir).then(
      () => true,
      () => false,
    );
    // One made while the reset was unknown adopts the current one: wiping it would lose what
    // was written meanwhile.
    if (exists && resetPending(madeUnder(marker), current)) {
      this.options.logger?.info(
        { client: clientId, reset: current },
        'workspace reset by an admin',
      );
      await this.removeDir(dir);
      marker = undefined;
    } else if (!exists) {
      // A new directory (a stale marker's is gone) is made under the reset known now: an older
      // id left in the marker would wipe what is written in it at the next call.
      marker = undefined;
    }
    try {
      await mkdir(dir, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const st = await lstat(dir);
    if (!st.isDirectory()) throw new Error(`workspace ${dir} is not a directory`);
    if (this.mode !== 'off') await this.mountQuota(clientId, dir);
    if (process.getuid?.() === 0) {
      await chown(dir, SANDBOX_UID, SANDBOX_GID);
      await chmod(dir, 0o700);
    }
    let made = marker ? madeUnder(marker) : undefined;
    if (made === undefined || (made === null && current !== undefined)) {
      // Under the reset known now: '' when there was none, null when Redis could not say.
      made = current === undefined ? null : (current ?? '');
      const fresh: Marker = {
        client: clientId,
        created: marker?.created ?? Date.now(),
        reset: made,
      };
      await writeFile(this.markerFile(dir), JSON.stringify(fresh), { mode: 0o600 });
    } else {
      await this.touch(dir);
    }
    this.known.set(dir, made);
  }

  private async mountQuota(clientId: string, dir: string): Promise<void> {
    try {
      const { growError } = await this.images.mount(await realpath(dir), this.sizeFor(clientId));
      this.mountedOnce = true;
      if (growError)
        this.options.logger?.warn(
          { client: clientId, err: growError },
          'workspace quota raised but the filesystem could not grow yet; it keeps its old size',
        );
    } catch (err) {
      const message = `workspace quota: could not mount a filesystem image on ${dir}: ${(err as Error).message}`;
      // auto: a host that cannot loop-mount at all (not root, no loop devices, no CAP_SYS_ADMIN)
      // runs with plain directories, said once. Once mounting has worked, a failure is real.
      if (this.mode === 'auto' && !this.mountedOnce) {
        this.mode = 'off';
        this.options.logger?.warn(
          { err, workspacesRoot: this.root },
          'workspace quotas are OFF: this host cannot loop-mount filesystem images (sandbox.workspaceQuota: auto); workspaces are plain directories without a size limit',
        );
        return;
      }
      throw new SandboxError('workspace_unavailable', message, { cause: err });
    }
  }

  /** Unmounts (lazily) and deletes a workspace: its filesystem image, directory and marker. */
  private async removeDir(dir: string): Promise<void> {
    const real = await realpath(dir).catch(() => dir);
    await this.images.unmount(real);
    await this.images.removeImage(real);
    // After the unmount, what is left is the (normally empty) mount point; rm never follows links.
    await rm(dir, { recursive: true, force: true });
    await rm(this.markerFile(dir), { force: true });
    this.known.delete(dir);
  }

  /**
   * Retention, one pass: deletes workspaces unused for ttlDays, and those an admin reset since
   * they were made. A workspace used within busyMs (a call may be running in it) is left for a
   * later pass. Under the host lock, so no worker of the host mounts one while it goes.
   */
  async reap(now = Date.now()): Promise<{ expired: number; reset: number }> {
    const counts = { expired: 0, reset: 0 };
    const names = await readdir(this.root).catch(() => [] as string[]);
    if (names.length === 0) return counts;
    const source = this.options.resets;
    const all = (await source?.all()) ?? new Map<string, string>();
    // A directory without a marker is known by its name only: its own (client's) reset.
    const resets = new Map<string, string>();
    for (const [client, id] of all) resets.set(Workspaces.dirName(client), id);
    const ttlMs = (this.options.ttlDays ?? 0) * DAY_MS;
    const busyMs = this.options.busyMs ?? 0;
    await this.lock.with(async () => {
      for (const name of names) {
        if (name.startsWith('.')) continue;
        const dir = path.join(this.root, name);
        const used = await stat(this.markerFile(dir))
          .catch(() => stat(dir))
          .then(
            (st) => st.mtimeMs,
            () => undefined,
          );
        if (used === undefined || now - used < busyMs) continue;
        const marker = await this.readMarker(dir);
        // The marker names whose it is: a user's follows its client's resets too.
        const current = marker && source?.idIn ? source.idIn(all, marker.client) : resets.get(name);
        if (resetPending(madeUnder(marker), current)) {
          await this.removeDir(dir);
          counts.reset++;
        } else if (ttlMs > 0 && now - used > ttlMs) {
          await this.removeDir(dir);
          counts.expired++;
        }
      }
    });
    if (counts.expired + counts.reset > 0)
      this.options.logger?.info(
        counts,
        'deleted workspaces (unused past workspaceTtlDays, or reset)',
      );
    return counts;
  }

  /** Unmounts every workspace filesystem under the root (tests; taking a host out of service). */
  async unmountAll(): Promise<void> {
    await this.lock.with(async () => {
      for (const name of await readdir(this.root).catch(() => [] as string[])) {
        if (name.startsWith('.')) continue;
        const dir = path.join(this.root, name);
        await this.images.unmount(await realpath(dir).catch(() => dir));
        this.known.delete(dir);
      }
    });
  }

  /** Runs reap() every intervalMs (unref'd) until close(). */
  startReaper(intervalMs: number): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      void this.reap().catch((err: unknown) =>
        this.options.logger?.warn({ err }, 'workspace reaper failed'),
      );
    }, intervalMs);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * Resolves a path a model gave (relative to /workspace) on the host and refuses absolute
   * paths, `..` escapes and symlinks that lead out of the workspace. The sandboxed operation
   * checks again inside the container, where nothing of the host but the workspace is visible.
   *
   * Symlinks are followed one component at a time and read the way the sandbox sees them (an
   * absolute target under /workspace is the workspace): nothing outside the workspace is ever
   * looked at, so a link out gets one answer whether or not its target exists — no oracle over
   * the host's or other clients' file names.
   */
  async resolve(clientId: string, requested: string): Promise<ResolvedPath> {
    const relative = normalizeRelative(requested);
    const base = await realpath(await this.ensure(clientId));
    const outside = () =>
      new WorkspacePathError(
        'symlink_outside',
        `"${relative}" leads outside the workspace through a symbolic link`,
      );
    const pending = relative ? relative.split('/') : [];
    const resolved: string[] = [];
    let exists = true;
    let links = 0;
    while (pending.length > 0) {
      const part = pending.shift()!;
      if (part === '' || part === '.') continue;
      if (part === '..') {
        // Only a link's target gets here (the request itself is normalized): it climbs out.
        if (resolved.length === 0) throw outside();
        resolved.pop();
        continue;
      }
      if (!exists) {
        resolved.push(part); // below a missing part nothing can be a link
        continue;
      }
      const at = path.join(base, ...resolved, part);
      const st = await lstat(at).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return undefined;
        throw err;
      });
      if (!st?.isSymbolicLink()) {
        if (!st) exists = false;
        resolved.push(part);
        continue;
      }
      if (++links > MAX_LINKS)
        throw new WorkspacePathError('invalid', `"${relative}" has too many symbolic links`);
      const target = await readlink(at);
      if (path.posix.isAbsolute(target)) {
        if (target !== WORKSPACE_MOUNT && !target.startsWith(WORKSPACE_MOUNT + '/'))
          throw outside();
        resolved.length = 0;
        pending.unshift(...target.slice(WORKSPACE_MOUNT.length).split('/'));
      } else {
        pending.unshift(...target.split('/'));
      }
    }
    return {
      relative,
      sandboxPath: relative ? `${WORKSPACE_MOUNT}/${relative}` : WORKSPACE_MOUNT,
      hostPath: path.join(base, ...resolved),
      exists,
    };
  }
}

/** 'a/./b/' → 'a/b'; '' and '.' → ''; absolute, '..'-escaping and NUL paths are refused. */
export function normalizeRelative(requested: string): string {
  if (requested.includes('\0')) throw new WorkspacePathError('invalid', 'path contains a NUL byte');
  const p = requested.trim() === '' ? '.' : requested;
  if (path.posix.isAbsolute(p) || /^[A-Za-z]:[\\/]/.test(p)) {
    const hint = p.startsWith(WORKSPACE_MOUNT + '/')
      ? ` (write "${p.slice(WORKSPACE_MOUNT.length + 1)}")`
      : '';
    throw new WorkspacePathError(
      'absolute',
      `"${requested}" is absolute; give a path relative to the workspace${hint}`,
    );
  }
  const normalized = path.posix.normalize(p).replace(/\/+$/, '');
  if (normalized === '..' || normalized.startsWith('../')) {
    throw new WorkspacePathError('escapes', `"${requested}" leads outside the workspace`);
  }
  return normalized === '.' ? '' : normalized;
}
