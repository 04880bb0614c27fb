/**
 * Stdio upstreams on a worker (`command:` / `npm:`, docs/upstreams.md): one long-lived sandbox
 * per upstream per worker host (SandboxDriver.open) and one SDK client over its stdio, shared by
 * the calls (multiplexed by JSON-RPC id) and the catalog's listing. Started on first use or at
 * worker start (`start: eager`), restarted with backoff after a crash, stopped after
 * `idleSeconds` without a call. With `share`, the worker processes of one host elect an owner
 * that runs it; the others reach it through the owner's socket (stdio-share.ts).
 */
import type net from 'node:net';
import { rm } from 'node:fs/promises';
import { Client, ProtocolError } from '@modelcontextprotocol/client';
import { ToolError } from '@toolgate/registry';
import { isStdioUpstream, stdioArgv, type UpstreamConfig } from '@toolgate/config';
import type { OpenRequest, ProcessExit, SandboxProcess } from '@toolgate/sandbox';
import { raceAbort } from './abort.js';
import { unavailable } from './errors.js';
import {
  dialShared,
  FollowerSession,
  listenShared,
  OWNER_STATE_METHOD,
  OwnerLock,
  sharePaths,
  socketPathFits,
  socketProcess,
  type StdioShare,
} from './stdio-share.js';
import { SandboxStdioTransport, STDIO_SHARED_UNAVAILABLE } from './stdio-transport.js';

/**
 * `stopped`: not started yet; `starting`; `up`; `backoff`: crashed, waiting before the next
 * start; `idle`: stopped after idleSeconds without a call (starts again on the next).
 */
export type StdioState = 'stopped' | 'starting' | 'up' | 'backoff' | 'idle';

/** What a worker says of its server (`GET /v1/upstreams`, `/readyz`; docs/upstreams.md). */
export interface StdioSnapshot {
  state: StdioState;
  /** Epoch ms the state began. */
  since: number;
  /** Starts after a crash or a failed start, over the worker's life. */
  restarts: number;
  /** Why it last crashed or failed to start (≤ 300 characters), and when (epoch ms). */
  lastError?: string;
  lastErrorAt?: number;
  /**
   * This worker uses its host's shared server, run by worker `owner`: the fields above are the
   * owner's, as it last said them.
   */
  shared?: true;
  owner?: string;
  /** This worker runs its host's shared server: the other workers connected to it now. */
  followers?: number;
}

/** The wait before a crashed server starts again: 1 s, doubling per crash in a row, ≤ 60 s. */
export const STDIO_BACKOFF = { initialMs: 1000, maxMs: 60_000, factor: 2 } as const;
/** A server up this long has its crash count forgotten: the next crash waits 1 s again. */
const STABLE_MS = 60_000;
/** How often idleness is looked at. */
const IDLE_CHECK_MS = 1000;
/** The server's last stderr line, cut to this, says why a start failed. */
const REASON_MAX = 300;
/** A worker id as a follower shows its owner's (hostname-pid-random). */
const OWNER_MAX = 128;

export interface StdioLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

export interface StdioServerOptions {
  /** The worker's sandbox: `open` of its driver. */
  open: (request: OpenRequest) => Promise<SandboxProcess>;
  /** The host directory of a client's workspace (created if need be). */
  workspaceOf?: (clientId: string) => Promise<string>;
  log: StdioLogger;
  /** Tests shorten it. */
  backoff?: { initialMs: number; maxMs: number; factor: number };
  /** One server per host: the worker processes sharing a stateDir share each server. */
  share?: StdioShare;
}

/** How often a worker looks again for its host's owner while none answers. */
const JOIN_RETRY_MS = 100;

export class StdioServer {
  private client: Client | undefined;
  private transport: SandboxStdioTransport | undefined;
  private starting: Promise<Client> | undefined;
  private currentState: StdioState = 'stopped';
  private since = Date.now();
  private restarts = 0;
  /** It crashed or failed to start, and has not started since. */
  private failedLast = false;
  private lastError: { text: string; at: number } | undefined;
  /** Crashes in a row (a server up for STABLE_MS starts the count again). */
  private crashes = 0;
  private retryAt = 0;
  private upSince = 0;
  private inFlight = 0;
  private lastUsed = Date.now();
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly idleTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Servers being stopped (close() waits for them too: no sandbox outlives the worker). */
  private readonly stopping = new Set<Promise<void>>();
  /** The host-wide lock and socket files (undefined: this worker runs its own server). */
  private readonly paths: { lock: string; socket: string } | undefined;
  /** Held while this worker owns its host's server; its socket and the followers on it. */
  private lock: OwnerLock | undefined;
  private listener: net.Server | undefined;
  private readonly sessions = new Set<FollowerSession>();
  /** Followers' calls in flight here, per follower. */
  private readonly proxied = new Map<FollowerSession, number>();
  /** A follower's view of its owner: what the owner last said of its server. */
  private ownerState: Record<string, unknown> | undefined;
  /** The calls' log listeners, by call id (see `listen`). */
  private readonly logListeners = new Map<string, (level: string, text: string) => void>();
  /** The catalog's: `notifications/tools/list_changed` from the server. */
  onToolsChanged: (() => void) | undefined;
  /** The catalog's: the server (re)started, so its list is worth reading now. */
  onStarted: (() => void) | undefined;

  constructor(
    readonly upstream: UpstreamConfig,
    private readonly options: StdioServerOptions,
  ) {
    const paths = options.share ? sharePaths(options.share, upstream) : undefined;
    if (paths && !socketPathFits(paths.socket))
      options.log.warn(
        { upstream: upstream.id, socket: paths.socket },
        'stdio upstream: the socket path is too long to share a server on this host',
      );
    else this.paths = paths;
    if (upstream.idleSeconds > 0) {
      this.idleTimer = setInterval(() => this.stopIfIdle(), IDLE_CHECK_MS);
      this.idleTimer.unref();
    }
  }

  get state(): StdioState {
    return this.currentState;
  }

  private set current(state: StdioState) {
    if (state === this.currentState) return;
    this.since = Date.now();
    this.currentState = state;
    for (const session of this.sessions) session.notify(OWNER_STATE_METHOD, this.stateParams());
  }

  snapshot(): StdioSnapshot {
    const o = this.ownerState;
    if (this.client && o && typeof o.state === 'string') {
      return {
        state: o.state as StdioState,
        since: typeof o.since === 'number' ? o.since : this.since,
        restarts: typeof o.restarts === 'number' ? o.restarts : 0,
        ...(typeof o.lastError === 'string' && typeof o.lastErrorAt === 'number'
          ? { lastError: o.lastError.slice(0, REASON_MAX), lastErrorAt: o.lastErrorAt }
          : {}),
        shared: true,
        // Another process's words: cut as this one's own would be.
        ...(typeof o.worker === 'string' ? { owner: o.worker.slice(0, OWNER_MAX) } : {}),
      };
    }
    return {
      state: this.currentState,
      since: this.since,
      restarts: this.restarts,
      ...(this.lastError ? { lastError: this.lastError.text, lastErrorAt: this.lastError.at } : {}),
      ...(this.lock ? { followers: this.sessions.size } : {}),
    };
  }

  /** What the owner tells its followers of its server. */
  private stateParams(): Record<string, unknown> {
    return {
      state: this.currentState,
      since: this.since,
      restarts: this.restarts,
      ...(this.lastError ? { lastError: this.lastError.text, lastErrorAt: this.lastError.at } : {}),
      ...(this.options.share ? { worker: this.options.share.worker } : {}),
    };
  }

  /** A session is open now (no start needed to talk to it). */
  get running(): boolean {
    return this.client !== undefined;
  }

  /** The memory the server's sandbox uses now, bytes (undefined when not running or unknown). */
  async memoryBytes(): Promise<number | undefined> {
    return (await this.transport?.sandbox?.stats())?.memoryBytes;
  }

  /**
   * The client of the running server; starts it when it is not (after a crash, once its
   * backoff is over). A caller whose signal fires stops waiting; the start goes on.
   */
  connect(signal: AbortSignal): Promise<Client> {
    if (this.closed) return Promise.reject(unavailable(this.upstream, 'the worker is stopping'));
    if (this.client) return Promise.resolve(this.client);
    this.starting ??= (this.paths ? this.join(this.paths) : this.start()).finally(
      () => (this.starting = undefined),
    );
    return raceAbort(this.starting, signal);
  }

  /**
   * The host's server: this worker's own once it holds the host's lock for this upstream (it
   * then listens for the others and starts the server), else the owner's through its socket.
   * An owner that has just died leaves its socket refusing: the lock is free again at once (the
   * kernel drops it with the owner's flock child), so the loop takes it on a later turn.
   */
  private async join(paths: { lock: string; socket: string }): Promise<Client> {
    const u = this.upstream;
    const deadline = Date.now() + u.timeoutMs;
    for (;;) {
      if (this.closed) throw unavailable(u, 'the worker is stopping');
      if (this.lock) return this.start();
      const lock = await OwnerLock.take(paths.lock).catch((err: unknown) => {
        throw unavailable(u, `the host’s lock: ${messageOf(err)}`, err);
      });
      if (lock) {
        if (this.closed) {
          await lock.release();
          throw unavailable(u, 'the worker is stopping');
        }
        this.lock = lock;
        try {
          this.listener = await listenShared(paths.socket, (sock) => this.accept(sock));
        } catch (err) {
          // It still runs its own server; the others wait for a socket (and time out).
          this.options.log.warn(
            { upstream: u.id, err: messageOf(err) },
            'stdio upstream: cannot share the server with this host’s other workers',
          );
        }
        this.options.log.info(
          { upstream: u.id },
          'stdio upstream: this worker runs the host’s server',
        );
        return this.start();
      }
      const client = await this.follow(paths.socket);
      if (client) return client;
      if (Date.now() >= deadline)
        throw unavailable(u, 'the host’s shared server did not answer (another worker holds it)');
      await new Promise((r) => setTimeout(r, JOIN_RETRY_MS));
    }
  }

  /** Connects to the owner's socket; undefined when nothing listens there. */
  private async follow(socket: string): Promise<Client | undefined> {
    const u = this.upstream;
    const sock = await dialShared(socket);
    if (!sock) return undefined;
    this.current = 'starting';
    const transport: SandboxStdioTransport = new SandboxStdioTransport({
      open: () => Promise.resolve(socketProcess(sock)),
      onLog: (level, data) => this.log(level, data),
      intercept: (method, params) => {
        if (method !== OWNER_STATE_METHOD) return false;
        this.ownerState = (params ?? {}) as Record<string, unknown>;
        return true;
      },
      onExit: (exit) => this.unfollowed(transport, exit),
    });
    const client = this.newClient();
    try {
      await client.connect(transport, { timeout: u.timeoutMs });
    } catch (err) {
      await client.close().catch(() => undefined);
      this.current = 'stopped';
      // The owner's own words (its server did not start) when it said them.
      if (err instanceof ProtocolError && err.code === STDIO_SHARED_UNAVAILABLE)
        throw new ToolError('upstream_unavailable', err.message, { cause: err });
      throw unavailable(u, `the host’s shared server: ${messageOf(err)}`, err);
    }
    if (this.closed) {
      await client.close().catch(() => undefined);
      throw unavailable(u, 'the worker is stopping');
    }
    this.client = client;
    this.transport = transport;
    this.current = 'up';
    this.lastUsed = Date.now();
    this.options.log.info({ upstream: u.id }, 'stdio upstream: using the host’s shared server');
    this.onStarted?.();
    return client;
  }

  /** The owner's socket closed: its calls in flight have failed; the next call joins again. */
  private unfollowed(transport: SandboxStdioTransport, exit: ProcessExit): void {
    if (this.transport !== transport) return;
    this.client = undefined;
    this.transport = undefined;
    this.ownerState = undefined;
    if (exit.killed) return; // stop() already said why
    this.options.log.warn(
      { upstream: this.upstream.id },
      'stdio upstream: the host’s owner went away',
    );
    this.current = 'stopped';
    // An eager server comes back by itself: this worker joins again (and may own it now).
    if (this.upstream.start === 'eager' && !this.closed) {
      this.restartTimer = setTimeout(
        () =>
          void this.connect(AbortSignal.timeout(this.upstream.timeoutMs)).catch(() => undefined),
        JOIN_RETRY_MS,
      );
      this.restartTimer.unref();
    }
  }

  /** A follower connected to this owner's socket. */
  private accept(sock: net.Socket): void {
    if (this.closed) {
      sock.destroy();
      return;
    }
    const session: FollowerSession = new FollowerSession(
      sock,
      {
        upstream: this.upstream,
        connect: (signal) => this.connect(signal),
        begin: (s) => {
          this.begin();
          this.proxied.set(s, (this.proxied.get(s) ?? 0) + 1);
        },
        end: (s) => {
          this.end();
          const n = (this.proxied.get(s) ?? 1) - 1;
          if (n > 0) this.proxied.set(s, n);
          else this.proxied.delete(s);
        },
        stateParams: () => this.stateParams(),
      },
      () => this.sessions.delete(session),
    );
    this.sessions.add(session);
  }

  /** A call begins: the server is not stopped for idleness while one is in flight. */
  begin(): void {
    this.inFlight++;
    this.lastUsed = Date.now();
  }

  end(): void {
    this.inFlight--;
    this.lastUsed = Date.now();
  }

  /**
   * Hands the server's `notifications/message` to call `callId` as its output. A stdio session
   * does not say which request a notification belongs to, so they go to a call only while it is
   * the one call in flight here; with several in flight they are dropped (not guessed: another
   * client's call must not see them).
   */
  listen(callId: string, onLog: (level: string, text: string) => void): void {
    this.logListeners.set(callId, onLog);
  }

  unlisten(callId: string): void {
    this.logListeners.delete(callId);
  }

  private log(level: string, data: unknown): void {
    // An owner counts its followers' calls in flight too: one call on the whole host.
    if (this.inFlight !== 1) return;
    if (this.logListeners.size === 1) {
      const text = typeof data === 'string' ? data : JSON.stringify(data);
      for (const onLog of this.logListeners.values()) onLog(level, `${text}\n`);
    } else if (this.logListeners.size === 0 && this.proxied.size === 1) {
      for (const session of this.proxied.keys())
        session.notify('notifications/message', { level, data });
    }
  }

  /** Stops the server for good (the worker is closing). */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.idleTimer);
    clearTimeout(this.restartTimer);
    await this.starting?.catch(() => undefined);
    if (this.listener) {
      // No new follower; the followers' calls in flight end first (bounded by timeoutMs).
      this.listener.close();
      this.listener = undefined;
      const end = Date.now() + this.upstream.timeoutMs;
      while (this.proxied.size > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
      await Promise.all([...this.sessions].map((s) => s.close()));
      if (this.paths) await rm(this.paths.socket, { force: true });
    }
    await this.stop('stopped');
    await Promise.all(this.stopping); // an idle stop's kill may still be under way
    // Released last: a new owner's socket must not be removed by this one's cleanup.
    await this.lock?.release();
    this.lock = undefined;
  }

  private async start(): Promise<Client> {
    const u = this.upstream;
    const wait = this.retryAt - Date.now();
    if (wait > 0) {
      this.current = 'backoff';
      await new Promise((r) => setTimeout(r, wait));
      if (this.closed) throw unavailable(u, 'the worker is stopping');
    }
    this.current = 'starting';
    // Why a server that exits at once did (a missing npm package, a bad command): its stderr.
    let lastStderr = '';
    const workspace =
      u.workspace !== undefined ? await this.options.workspaceOf?.(u.workspace) : undefined;
    const transport = new SandboxStdioTransport({
      open: () =>
        this.options.open({
          image: u.image,
          argv: stdioArgv(u),
          ...(workspace !== undefined ? { workspace } : {}),
          network: u.allowNetwork,
          label: `upstream:${u.id}`,
          ...(u.workspace !== undefined ? { clientId: u.workspace } : {}),
        }),
      onStderr: (line) => {
        if (line.trim()) lastStderr = line.trim().slice(0, REASON_MAX);
        this.options.log.debug({ upstream: u.id, line }, 'stdio upstream stderr');
      },
      onLog: (level, data) => this.log(level, data),
      onExit: (exit) => this.exited(transport, exit),
    });
    const client = this.newClient();
    try {
      await client.connect(transport, { timeout: u.timeoutMs });
    } catch (err) {
      await client.close().catch(() => undefined);
      const why = lastStderr ? ` (its stderr: ${lastStderr})` : '';
      const reason = `the stdio server did not start: ${messageOf(err)}${why}`;
      this.crashed(reason);
      throw unavailable(u, reason, err);
    }
    if (this.closed) {
      await client.close().catch(() => undefined);
      throw unavailable(u, 'the worker is stopping');
    }
    this.client = client;
    this.transport = transport;
    if (this.failedLast) this.restarts++;
    this.failedLast = false;
    this.current = 'up';
    this.upSince = Date.now();
    this.lastUsed = Date.now();
    this.options.log.info({ upstream: u.id }, 'stdio upstream started');
    this.onStarted?.();
    return client;
  }

  private newClient(): Client {
    const client = new Client(
      { name: 'toolgate', version: '0.1.0' },
      {
        capabilities: {},
        listChanged: {
          tools: {
            autoRefresh: false,
            onChanged: () => {
              this.onToolsChanged?.();
              // An owner's followers hear it too (their catalogs read the list again).
              for (const s of this.sessions) s.notify('notifications/tools/list_changed', {});
            },
          },
        },
      },
    );
    client.onerror = () => undefined; // each request reports its own failure
    return client;
  }

  /** The server's sandbox ended: on purpose (idle, close) or a crash. */
  private exited(transport: SandboxStdioTransport, exit: ProcessExit): void {
    if (this.transport !== transport) return;
    this.client = undefined;
    this.transport = undefined;
    if (exit.killed) return; // stop() already said why
    this.options.log.warn(
      { upstream: this.upstream.id, exitCode: exit.exitCode, oomKilled: exit.oomKilled },
      'stdio upstream crashed',
    );
    this.crashed(
      exit.oomKilled
        ? 'the stdio server ran out of memory (memoryMb)'
        : `the stdio server exited with code ${exit.exitCode}`,
    );
    // An eager server comes back by itself; a lazy one on its next use (both after backoff).
    if (this.upstream.start === 'eager' && !this.closed) {
      this.restartTimer = setTimeout(
        () =>
          void this.connect(AbortSignal.timeout(this.upstream.timeoutMs)).catch(() => undefined),
        Math.max(0, this.retryAt - Date.now()),
      );
      this.restartTimer.unref();
    }
  }

  private crashed(reason: string): void {
    this.failedLast = true;
    this.lastError = { text: reason.slice(0, REASON_MAX), at: Date.now() };
    const b = this.options.backoff ?? STDIO_BACKOFF;
    if (this.upSince > 0 && Date.now() - this.upSince >= STABLE_MS) this.crashes = 0;
    this.upSince = 0;
    this.crashes++;
    this.retryAt = Date.now() + Math.min(b.maxMs, b.initialMs * b.factor ** (this.crashes - 1));
    this.current = 'backoff';
  }

  private stopIfIdle(): void {
    const idleMs = this.upstream.idleSeconds * 1000;
    if (!this.client || this.inFlight > 0 || Date.now() - this.lastUsed < idleMs) return;
    this.options.log.info(
      { upstream: this.upstream.id, idleSeconds: this.upstream.idleSeconds },
      'stdio upstream stopped: idle',
    );
    void this.stop('idle');
  }

  private async stop(state: 'idle' | 'stopped'): Promise<void> {
    const client = this.client;
    // Forgotten before the kill, which takes a while (a docker sandbox): a call that comes
    // meanwhile starts a new server rather than writing to the one going away.
    this.client = undefined;
    this.transport = undefined;
    this.current = state;
    if (!client) return;
    const closing = client.close().catch(() => undefined);
    this.stopping.add(closing);
    await closing;
    this.stopping.delete(closing);
  }
}

/** A worker's stdio upstreams, by id. */
export class StdioServers {
  private readonly servers = new Map<string, StdioServer>();

  constructor(upstreams: readonly UpstreamConfig[], options: StdioServerOptions) {
    for (const u of upstreams)
      if (isStdioUpstream(u)) this.servers.set(u.id, new StdioServer(u, options));
  }

  get(id: string): StdioServer | undefined {
    return this.servers.get(id);
  }

  /** Starts the `start: eager` ones (their failures are logged and retried with backoff). */
  startEager(): void {
    for (const server of this.servers.values()) {
      if (server.upstream.start !== 'eager') continue;
      void server.connect(AbortSignal.timeout(server.upstream.timeoutMs)).catch(() => undefined);
    }
  }

  states(): Record<string, StdioState> {
    return Object.fromEntries([...this.servers].map(([id, s]) => [id, s.state]));
  }

  snapshots(): Record<string, StdioSnapshot> {
    return Object.fromEntries([...this.servers].map(([id, s]) => [id, s.snapshot()]));
  }

  async close(): Promise<void> {
    await Promise.all([...this.servers.values()].map((s) => s.close()));
  }
}

function messageOf(err: unknown): string {
  const e = err as { message?: unknown };
  return (typeof e?.message === 'string' ? e.message : String(err)).slice(0, 500);
}
