/**
 * The code-mode channel: a unix socket the worker listens on in a directory of its own, bind-
 * mounted read-only at CHANNEL_DIR into one sandbox only (docker: one directory per container,
 * made with it; bwrap: one per call). No network is involved, and no other sandbox has the
 * directory, so a connection on it can only come from that sandbox.
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readdir, rm, stat } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';

/** Where the channel's directory appears inside a sandbox. */
export const CHANNEL_DIR = '/run/toolgate';
/** The socket a sandboxed program connects to (`toolgate` Python module). */
export const CHANNEL_SOCKET = `${CHANNEL_DIR}/sock`;

/** Each accepted connection of a call's channel (the socket is the sandbox's end). */
export type ChannelHandler = (socket: Socket) => void;

function channelsRoot(stateDir: string): string {
  return path.join(path.resolve(stateDir), 'channels');
}

/**
 * A fresh, empty directory for one sandbox's channel, `<stateDir>/channels/<owner>/<random>`.
 * Grouped by the worker that made it (its owner id): a worker killed mid-script never runs its
 * cleanup, and the owner's name is how another worker's reaper tells its leftovers from a live
 * worker's (reapChannelDirs).
 */
export async function makeChannelDir(stateDir: string, owner: string): Promise<string> {
  const ownerDir = path.join(channelsRoot(stateDir), encodeURIComponent(owner));
  // 0711: the sandbox's uid (bwrap runs as it) may pass through but not list the others.
  await mkdir(ownerDir, { recursive: true, mode: 0o711 });
  const dir = path.join(ownerDir, randomBytes(9).toString('base64url'));
  await mkdir(dir, { mode: 0o755 });
  return dir;
}

/**
 * How old a directory without sandboxes' directories in it must be before a reaper takes it: a
 * channel of the layout before owners (`channels/<random>`, a worker of an older version may
 * still be using it) lives one call, at most the 300 s script timeout.
 */
export const LEGACY_CHANNEL_MS = 10 * 60_000;

/**
 * Removes the channel directories of workers that are gone (`isGone`), never `self`'s: the
 * drivers' reapers call it at start and every reaper.intervalMs. Returns the entries removed.
 */
export async function reapChannelDirs(
  stateDir: string,
  self: string,
  isGone: (owner: string) => Promise<boolean> | boolean,
  now = Date.now(),
): Promise<number> {
  const root = channelsRoot(stateDir);
  let removed = 0;
  for (const entry of await readdir(root, { withFileTypes: true }).catch(() => [])) {
    if (!entry.isDirectory()) continue;
    let owner: string;
    try {
      owner = decodeURIComponent(entry.name);
    } catch {
      continue;
    }
    if (owner === self || !(await isGone(owner))) continue;
    const dir = path.join(root, entry.name);
    const inside = await readdir(dir, { withFileTypes: true }).catch(() => []);
    if (!inside.some((e) => e.isDirectory())) {
      const st = await stat(dir).catch(() => undefined);
      if (!st || now - st.mtimeMs < LEGACY_CHANNEL_MS) continue;
    }
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    removed++;
  }
  return removed;
}

export async function removeChannelDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true }).catch(() => undefined);
}

/** Listens on `<dir>/sock` for the length of one call; close() ends every connection. */
export class ChannelListener {
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    private readonly file: string,
  ) {}

  static async open(dir: string, onConnection: ChannelHandler): Promise<ChannelListener> {
    const file = path.join(dir, 'sock');
    await rm(file, { force: true });
    const server = createServer();
    const listener = new ChannelListener(server, file);
    server.on('connection', (socket) => {
      listener.sockets.add(socket);
      socket.once('close', () => listener.sockets.delete(socket));
      onConnection(socket);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(file, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', () => undefined);
    // The sandbox runs as another uid than the worker: connecting needs write on the socket.
    await chmod(file, 0o666);
    return listener;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await rm(this.file, { force: true }).catch(() => undefined);
  }
}
