/**
 * Per-client workspaces on the host: `<root>/<sanitized clientId>`, mounted read-write at
 * /workspace in that client's sandboxes and nowhere else. Also the host-side half of the file
 * tools' path confinement (the in-sandbox half runs inside the container).
 */
import { createHash } from 'node:crypto';
import { chown, lstat, mkdir, readlink, realpath, chmod } from 'node:fs/promises';
import path from 'node:path';

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

export class Workspaces {
  readonly root: string;
  private readonly known = new Set<string>();

  constructor(root: string) {
    this.root = path.resolve(root);
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

  /** Creates the client's workspace if needed (owned by the sandbox user) and returns its path. */
  async ensure(clientId: string): Promise<string> {
    const dir = this.pathFor(clientId);
    // Checked once per process; a workspace deleted behind our back is recreated by the next miss.
    if (this.known.has(dir)) {
      const ok = await lstat(dir).then(
        (st) => st.isDirectory(),
        () => false,
      );
      if (ok) return dir;
      this.known.delete(dir);
    }
    await mkdir(this.root, { recursive: true, mode: 0o711 });
    try {
      await mkdir(dir, { mode: 0o700 });
      if (process.getuid?.() === 0) {
        await chown(dir, SANDBOX_UID, SANDBOX_GID);
        await chmod(dir, 0o700);
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const st = await lstat(dir);
    if (!st.isDirectory()) throw new Error(`workspace ${dir} is not a directory`);
    this.known.add(dir);
    return dir;
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
