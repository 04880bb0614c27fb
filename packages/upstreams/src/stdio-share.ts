/**
 * One stdio server per worker host (docs/upstreams.md): the worker processes that share a
 * sandbox stateDir elect an owner per upstream with an flock, and the others talk to the owner's
 * server through a unix socket under `<stateDir>/upstreams`, which no sandbox mounts.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmod, mkdir, rm } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import {
  ProtocolError,
  SdkError,
  SdkErrorCode,
  type Client,
  type JSONRPCMessage,
  type RequestId,
} from '@modelcontextprotocol/client';
import { stdioArgv, type UpstreamConfig } from '@toolgate/config';
import type { ProcessExit, SandboxProcess } from '@toolgate/sandbox';
import { ToolError } from '@toolgate/registry';
import { unavailable } from './errors.js';
import { SandboxStdioTransport, STDIO_SHARED_UNAVAILABLE } from './stdio-transport.js';

/** The owner's state, sent to each follower when it connects and whenever it changes. */
export const OWNER_STATE_METHOD = 'notifications/toolgate/owner';
/** A unix socket's path must fit sun_path (108 bytes with its NUL). */
const SOCKET_PATH_MAX = 107;

/** Where a host's shared servers live, and what keeps two deployments' apart. */
export interface StdioShare {
  /** `<stateDir>/upstreams`: the same stateDir is the same host. */
  dir: string;
  /** The Redis key prefix and the driver: two deployments (or drivers) never share a server. */
  scope: string;
  /** This worker's id, shown by followers as their server's owner. */
  worker: string;
}

/**
 * The file names of an upstream's lock and socket: a hash of the deployment, the upstream id and
 * everything that makes its sandbox (argv, image, workspace, network), so a worker with another
 * config for the same id never talks to a server it did not mean.
 */
export function sharePaths(share: StdioShare, u: UpstreamConfig): { lock: string; socket: string } {
  const key = createHash('sha256')
    .update(
      JSON.stringify([
        share.scope,
        u.id,
        stdioArgv(u),
        u.image,
        u.workspace ?? null,
        u.allowNetwork,
      ]),
    )
    .digest('hex')
    .slice(0, 16);
  const base = path.join(path.resolve(share.dir), key);
  return { lock: `${base}.lock`, socket: `${base}.sock` };
}

/** Whether the socket path fits a unix socket (a very long stateDir does not: no sharing). */
export function socketPathFits(socket: string): boolean {
  return Buffer.byteLength(socket) <= SOCKET_PATH_MAX;
}

/**
 * The owner's hold on an upstream: `flock -xn <lock> …` in a child whose stdin is a pipe from
 * this process. The child keeps the lock until that pipe closes, at release or when this process
 * dies (even by kill -9), so a dead owner never leaves a stale lock.
 */
export class OwnerLock {
  private constructor(private readonly child: ChildProcessWithoutNullStreams) {}

  /** The lock when no other process holds it; undefined at once when one does. */
  static async take(file: string): Promise<OwnerLock | undefined> {
    await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    await chmod(path.dirname(file), 0o700);
    const child = spawn('flock', ['-xn', file, 'sh', '-c', 'echo locked; exec cat >/dev/null'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    child.stderr.resume();
    const locked = await new Promise<boolean>((resolve, reject) => {
      // No flock(1) at all is the host's problem, not another owner: said as such.
      child.once('error', (err) => reject(new Error(`cannot run flock: ${err.message}`)));
      child.once('exit', () => resolve(false));
      child.stdout.on('data', (b: Buffer) => {
        if (b.toString().includes('locked')) resolve(true);
      });
    });
    if (!locked) {
      child.kill('SIGKILL');
      return undefined;
    }
    // The lock must not keep a stopping worker alive: only its close() ends it.
    child.unref();
    return new OwnerLock(child);
  }

  async release(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.stdin.end();
    await exited;
  }
}

/** Starts listening on `socket` (owner side), after removing a dead owner's socket file. */
export async function listenShared(
  socket: string,
  onConnection: (sock: net.Socket) => void,
): Promise<net.Server> {
  // Under the lock: whatever socket file is there belongs to an owner that is gone.
  await rm(socket, { force: true });
  const server = net.createServer(onConnection);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket, () => {
      server.off('error', reject);
      resolve();
    });
  });
  await chmod(socket, 0o600);
  return server;
}

/** Connects to the owner's socket; undefined when no owner listens there (yet, or any more). */
export function dialShared(socket: string): Promise<net.Socket | undefined> {
  return new Promise((resolve) => {
    const sock = net.connect(socket);
    sock.once('connect', () => {
      sock.removeAllListeners('error');
      resolve(sock);
    });
    sock.once('error', () => resolve(undefined));
  });
}

/**
 * A socket dressed as a SandboxProcess, so SandboxStdioTransport (its line splitting, its
 * STDIO_MAX_MESSAGE_BYTES cap, its log tap) carries the shared sessions on both sides.
 */
export function socketProcess(sock: net.Socket): SandboxProcess {
  const stderr = new PassThrough();
  let killed = false;
  const exited = new Promise<ProcessExit>((resolve) => {
    sock.once('close', () => {
      stderr.end();
      resolve({ exitCode: 0, killed, oomKilled: false });
    });
  });
  sock.on('error', () => undefined); // 'close' follows and says it
  return {
    driver: 'bwrap',
    stdin: sock,
    stdout: sock,
    stderr,
    signal: () => Promise.resolve(),
    kill: async () => {
      killed = true;
      sock.destroy();
      await exited;
    },
    exited,
    stats: () => Promise.resolve({ memoryBytes: undefined }),
  };
}

/** What the owner's supervisor gives the sessions of its followers. */
export interface ShareOwner {
  readonly upstream: UpstreamConfig;
  /** The owner's client of the real server (starting it if need be). */
  connect(signal: AbortSignal): Promise<Client>;
  /** A follower's call begins / ends: counted as the owner's own (idleness, logs). */
  begin(session: FollowerSession): void;
  end(session: FollowerSession): void;
  /** The owner's snapshot, for a follower that just connected. */
  stateParams(): Record<string, unknown>;
}

/**
 * The owner's end of one follower's connection: a small MCP server that answers initialize with
 * the real server's capabilities and forwards tools/list and tools/call through the owner's
 * client (progress back to the follower's token, the follower's cancel to the real server).
 */
export class FollowerSession {
  private readonly transport: SandboxStdioTransport;
  private readonly pending = new Map<RequestId, AbortController>();
  private closed = false;

  constructor(
    sock: net.Socket,
    private readonly owner: ShareOwner,
    onClose: () => void,
  ) {
    this.transport = new SandboxStdioTransport({
      open: () => Promise.resolve(socketProcess(sock)),
    });
    this.transport.onmessage = (message) => this.receive(message);
    this.transport.onerror = () => undefined; // a bad line from a follower: skipped
    this.transport.onclose = () => {
      this.closed = true;
      for (const abort of this.pending.values()) abort.abort();
      onClose();
    };
    void this.transport.start().then(() => this.notify(OWNER_STATE_METHOD, owner.stateParams()));
  }

  /** Proxied requests not answered yet. */
  get inFlight(): number {
    return this.pending.size;
  }

  notify(method: string, params: Record<string, unknown>): void {
    if (this.closed) return;
    void this.transport.send({ jsonrpc: '2.0', method, params }).catch(() => undefined);
  }

  close(): Promise<void> {
    return this.transport.close();
  }

  private receive(message: JSONRPCMessage): void {
    if (!('method' in message)) return; // the follower never answers requests of ours
    if (!('id' in message) || message.id === undefined) {
      if (message.method === 'notifications/cancelled') {
        const id = (message.params as { requestId?: RequestId } | undefined)?.requestId;
        if (id !== undefined) this.pending.get(id)?.abort();
      }
      return;
    }
    void this.answer(message.id, message.method, (message.params ?? {}) as Record<string, unknown>);
  }

  private async answer(id: RequestId, method: string, params: Record<string, unknown>) {
    const u = this.owner.upstream;
    const abort = new AbortController();
    const signal = AbortSignal.any([abort.signal, AbortSignal.timeout(u.timeoutMs)]);
    this.pending.set(id, abort);
    const isCall = method === 'tools/call';
    if (isCall) this.owner.begin(this);
    try {
      let result: Record<string, unknown>;
      if (method === 'initialize') {
        const client = await this.owner.connect(signal);
        result = {
          protocolVersion: params.protocolVersion ?? client.getNegotiatedProtocolVersion(),
          capabilities: client.getServerCapabilities() ?? {},
          serverInfo: client.getServerVersion() ?? { name: u.id, version: '0' },
          ...(client.getInstructions() ? { instructions: client.getInstructions() } : {}),
        };
      } else if (method === 'ping') {
        result = {};
      } else if (method === 'tools/list' || isCall) {
        const client = await this.owner.connect(signal);
        const meta = params._meta as { progressToken?: string | number } | undefined;
        const token = meta?.progressToken;
        result = (await client.request({ method, params } as never, {
          signal,
          timeout: u.timeoutMs,
          ...(token !== undefined
            ? {
                onprogress: (p: { progress: number; total?: number; message?: string }) =>
                  this.notify('notifications/progress', { progressToken: token, ...p }),
              }
            : {}),
        })) as Record<string, unknown>;
      } else {
        throw new ProtocolError(-32601, `method not found: ${method}`);
      }
      await this.reply({ jsonrpc: '2.0', id, result } as JSONRPCMessage);
    } catch (err) {
      const error =
        err instanceof ProtocolError
          ? { code: err.code, message: err.message, ...(err.data ? { data: err.data } : {}) }
          : { code: STDIO_SHARED_UNAVAILABLE, message: this.unavailableText(err, method) };
      await this.reply({ jsonrpc: '2.0', id, error } as JSONRPCMessage);
    } finally {
      this.pending.delete(id);
      if (isCall) this.owner.end(this);
    }
  }

  /** The follower shows this text as its call's `upstream_unavailable` message. */
  private unavailableText(err: unknown, method: string): string {
    if (err instanceof ToolError) return err.message;
    const u = this.owner.upstream;
    if (err instanceof SdkError && err.code === SdkErrorCode.ConnectionClosed)
      return unavailable(
        u,
        `the stdio server ended during ${method}; it is started again on the next call`,
      ).message;
    if (err instanceof SdkError && err.code === SdkErrorCode.RequestTimeout)
      return unavailable(u, `${method} had no answer within ${u.timeoutMs} ms (timeoutMs)`).message;
    return unavailable(u, messageOf(err)).message;
  }

  private async reply(message: JSONRPCMessage): Promise<void> {
    if (this.closed) return;
    await this.transport.send(message).catch(() => undefined);
  }
}

function messageOf(err: unknown): string {
  const e = err as { message?: unknown };
  return (typeof e?.message === 'string' ? e.message : String(err)).slice(0, 500);
}
