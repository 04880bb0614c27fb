/**
 * The code-mode channel: a unix socket the worker listens on in a directory of its own, bind-
 * mounted read-only at CHANNEL_DIR into one sandbox only (docker: one directory per container,
 * made with it; bwrap: one per call). No network is involved, and no other sandbox has the
 * directory, so a connection on it can only come from that sandbox.
 */
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';

/** Where the channel's directory appears inside a sandbox. */
export const CHANNEL_DIR = '/run/toolgate';
/** The socket a sandboxed program connects to (`toolgate` Python module). */
export const CHANNEL_SOCKET = `${CHANNEL_DIR}/sock`;

/** Each accepted connection of a call's channel (the socket is the sandbox's end). */
export type ChannelHandler = (socket: Socket) => void;

/** A fresh, empty directory for one sandbox's channel under `<stateDir>/channels`. */
export async function makeChannelDir(stateDir: string): Promise<string> {
  const root = path.join(path.resolve(stateDir), 'channels');
  // 0711: the sandbox's uid (bwrap runs as it) may pass through but not list the others.
  await mkdir(root, { recursive: true, mode: 0o711 });
  const dir = path.join(root, randomBytes(9).toString('base64url'));
  await mkdir(dir, { mode: 0o755 });
  return dir;
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
