/** The one interface every sandbox driver implements (docker.ts, bwrap.ts). */
import type { Readable, Writable } from 'node:stream';
import type { ChannelHandler } from './channel.js';
import type { SandboxLimits } from './config.js';

export type DriverName = 'docker' | 'bwrap';

export type OutputStream = 'stdout' | 'stderr';

/** Limits that shape the sandbox itself; timeouts and output caps are per call. */
export type ResourceLimits = Pick<
  SandboxLimits,
  'memoryMb' | 'cpus' | 'pids' | 'fileSizeMb' | 'tmpfsMb'
>;

export interface RunRequest {
  /** Image key from the config (`python`, `shell`, …). */
  image: string;
  /** Program and arguments, run with /workspace (or /tmp) as working directory. */
  argv: readonly string[];
  /** Written to the program's stdin, which is then closed. */
  stdin?: string | Uint8Array;
  /** Host directory mounted read-write at /workspace; none = an empty read-only /workspace. */
  workspace?: string;
  /** Wall-clock limit; defaults to limits.timeoutMs, capped at limits.maxTimeoutMs. */
  timeoutMs?: number;
  /** Network access; refused unless the config sets allowNetwork. Default false. */
  network?: boolean;
  /** Per-call overrides of the configured limits. */
  limits?: Partial<
    Omit<SandboxLimits, 'timeoutMs' | 'maxTimeoutMs' | 'workspaceMb' | 'workspaceInodes'>
  >;
  /**
   * Aborting kills every process of the sandbox and removes it; run() then rejects with
   * SandboxError code `aborted`.
   */
  signal?: AbortSignal;
  /**
   * Live output, called while the program runs: whole UTF-8 characters, in order per stream,
   * and only what fits the output cap (the pieces of a stream add up to its RunResult text).
   * Nothing is delivered once run() has settled. A throwing callback is ignored.
   */
  onOutput?: (stream: OutputStream, text: string) => void;
  /**
   * Code mode: a unix socket at CHANNEL_SOCKET inside this sandbox (and no other), listened on
   * for the length of the run; each connection is handed here. Absent: the socket is not there.
   */
  channel?: ChannelHandler;
  /** For labels and logs. */
  callId?: string;
  /**
   * Whose call this is. Network-enabled sandboxes are told apart by it: each client gets a
   * share of the egress proxy's connections (docs/network-sandboxes.md).
   */
  clientId?: string;
  /**
   * The call's credential rules (docs/credentials.md): the egress proxy adds their headers to
   * this sandbox's requests to the origins they name. Only its `covers`/`headersFor` are used.
   */
  credentials?: EgressCredentials;
  /**
   * Told each payload byte the egress proxy relays for this run's sandbox, as it goes
   * (network-enabled runs; docs/budgets.md): the call's own count, whatever way it ends.
   */
  onEgress?: (bytes: number) => void;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  /** The program's exit status; 128+N when killed by signal N (as a shell reports it). */
  exitCode: number;
  /** Killed at the wall-clock timeout. */
  timedOut: boolean;
  /** stdout or stderr was cut at the output cap. */
  truncated: boolean;
  /** Killed because it kept writing far past the output cap. */
  outputLimited: boolean;
  /** Killed by the kernel for exceeding its memory limit. */
  oomKilled: boolean;
  durationMs: number;
  driver: DriverName;
  /** Ran in a pre-started container from the warm pool. */
  warm: boolean;
  /**
   * Payload bytes the egress proxy relayed for this run, both ways (network-enabled runs; the
   * sum of what onEgress was told). Counted until the program ended: its connections close then.
   */
  egressBytes?: number;
}

/** One long-lived sandbox running one program with piped stdio (SandboxDriver.open). */
export interface OpenRequest {
  /** Image key from the config (`python`, `shell`, …). */
  image: string;
  /** Program and arguments, run with /workspace (or /tmp) as working directory. */
  argv: readonly string[];
  /** Host directory mounted read-write at /workspace; none = an empty read-only /workspace. */
  workspace?: string;
  /** Network through the egress filter; refused unless the config sets allowNetwork. */
  network?: boolean;
  /** Overrides of the configured limits, held for the sandbox's whole life. */
  limits?: Partial<ResourceLimits>;
  /**
   * Bytes of stdout (and, apart, of stderr) held for a reader that is behind; past it the
   * program is paused on its next write until the reader catches up. Default 1 MiB.
   */
  outputBufferBytes?: number;
  /** Aborting is kill(); open() itself then rejects with SandboxError code `aborted`. */
  signal?: AbortSignal;
  /** For labels and logs (an upstream's or a session's id). */
  label?: string;
  /** Whose sandbox this is (the egress filter's share of connections; docs/network-sandboxes.md). */
  clientId?: string;
}

/** How a long-lived sandbox's program ended. */
export interface ProcessExit {
  /** The program's exit status; 128+N when killed by signal N (137 after kill()). */
  exitCode: number;
  /** Killed by the kernel for exceeding its memory limit. */
  oomKilled: boolean;
  /** Ended by kill() (or the open request's signal), not by itself. */
  killed: boolean;
}

/** Signals a caller may send to the program (e.g. SIGINT: interrupt without ending it). */
export type ProcessSignal = 'SIGINT' | 'SIGTERM' | 'SIGHUP' | 'SIGQUIT' | 'SIGUSR1' | 'SIGUSR2';

export interface ProcessStats {
  /** Memory the sandbox uses now (its cgroup's count), bytes; undefined where not cheap to read. */
  memoryBytes: number | undefined;
}

/**
 * A running long-lived sandbox. Its limits (memory, pids, CPU, file size) hold for its whole
 * life; there is no wall-clock timeout: the owner decides when it ends (kill()).
 */
export interface SandboxProcess {
  readonly driver: DriverName;
  /** The program's stdin; end() closes it (many programs then exit). */
  readonly stdin: Writable;
  /** The program's stdout and stderr; a reader that falls behind pauses the program (bounded). */
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Sends a signal to the program (not to the whole sandbox); nothing once it has ended. */
  signal(name: ProcessSignal): Promise<void>;
  /** Kills every process of the sandbox and removes it. Idempotent; resolves once it is gone. */
  kill(): Promise<void>;
  /** Settles once the program has ended and the sandbox is removed; never rejects. */
  readonly exited: Promise<ProcessExit>;
  stats(): Promise<ProcessStats>;
}

/** A driver runs one call in one throwaway sandbox; createSandbox() picks one. */
export interface SandboxDriver {
  readonly name: DriverName;
  /** Prepares the driver (checks images, fills pools, starts the reaper). Idempotent. */
  start(): Promise<void>;
  run(request: RunRequest): Promise<RunResult>;
  /**
   * Starts one long-lived sandbox running request.argv with piped stdio (an MCP stdio server,
   * an interpreter session). Resolves once the program is started; close() kills it too.
   */
  open(request: OpenRequest): Promise<SandboxProcess>;
  /** Resolves once the warm pool is full (docker); at once for bwrap. For benches and tests. */
  warmUp(timeoutMs?: number): Promise<void>;
  /** Point-in-time numbers for metrics (docs/spec.md §7). */
  stats(): SandboxStats;
  /** Stops background work and removes every sandbox this driver still owns. */
  close(): Promise<void>;
  /**
   * Removes the warm sandboxes and keeps none warm from now on; calls still to run start
   * theirs on demand. A stopping worker calls it first, before it waits for its calls, so a
   * worker killed during that wait leaves no warm pool behind (docker; bwrap keeps none).
   */
  drainWarm?(): Promise<void>;
  /**
   * Removes now what dead workers left behind (the reaper's pass, out of turn): docker, their
   * containers; bwrap, what is left in their cgroups (its sandboxes die with their worker as a
   * rule, --die-with-parent).
   */
  reap?(): Promise<number>;
}

export interface SandboxStats {
  driver: DriverName;
  /** Warm containers ready, per image key (always 0 for bwrap). */
  warm: Record<string, number>;
  /** Calls running now. */
  running: number;
  /** Long-lived sandboxes (open()) running now. */
  processes?: number;
  /** Containers removed by the reaper since start. */
  reaped: number;
}

/** pino-compatible; the sandbox never logs through console. */
export interface SandboxLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/**
 * Where one docker run's time went, in ms of the monotonic clock, in call order. Refilling the
 * warm pool is not a phase: it runs after the call, off its path (onStart, `pooled`).
 */
export interface RunPhases {
  /** performance.now() as run() was entered, to place the phases on a caller's clock. */
  startedAt: number;
  /** Taking a warm container from the pool (or creating and starting one, for a cold call). */
  checkoutMs: number;
  /** Binding the client's workspace onto the warm container's slot (0 when none). */
  mountMs: number;
  /** Call written to the waiting entrypoint → the program's exit reported on stdout or stderr. */
  execMs: number;
  /** First exit report → the other stream's report (all output in), or the stream's end. */
  collectMs: number;
}

/** Observations for metrics: called after every run and every container start. */
export interface SandboxHooks {
  onRun?(info: {
    image: string;
    driver: DriverName;
    warm: boolean;
    durationMs: number;
    result: RunResult;
    /** docker only. */
    phases?: RunPhases;
  }): void;
  /** `pooled`: started for the warm pool (off any call's path), not for one call. */
  onStart?(info: { image: string; driver: DriverName; durationMs: number; pooled: boolean }): void;
}

export interface DriverOptions {
  logger?: SandboxLogger;
  hooks?: SandboxHooks;
  /** Identifies this worker on its containers' labels; default host-pid-random. */
  ownerId?: string;
  /**
   * Whether another worker is alive, for the reaper. Default: its heartbeat file in stateDir
   * is fresh. Workers on several hosts sharing one engine can answer from Redis instead.
   */
  isOwnerAlive?: (ownerId: string) => Promise<boolean> | boolean;
  /**
   * Starts the egress filter for network-enabled sandboxes on the given host address and
   * returns its proxy URL (docker driver, `sandbox.allowNetwork`). Without it, such calls are
   * refused. The worker passes the http tools' SSRF guard (packages/tools egress-proxy.ts).
   */
  startEgressProxy?: StartEgressProxy;
}

/**
 * Starts the egress filter on `host`. `identify` names the client whose sandbox has a source
 * address (undefined: none of this worker's), so the filter can give each client its share of
 * connections; `disconnect` drops what an address still holds once its sandbox is gone.
 */
export type StartEgressProxy = (
  host: string,
  identify: (address: string) => string | undefined,
  credentialsOf?: (address: string) => EgressCredentials | undefined,
  meterOf?: (address: string) => EgressMeter | undefined,
) => Promise<EgressProxyHandle>;

/** Where the egress proxy counts the payload bytes it relays for one sandbox run. */
export interface EgressMeter {
  add(bytes: number): void;
}

/** A call's credential rules as the egress proxy uses them (the registry's CallCredentials). */
export interface EgressCredentials {
  covers(origin: EgressOrigin): boolean;
  headersFor(origin: EgressOrigin): Promise<[string, string][]>;
}

/** A request's scheme, host and port, as a credential rule binds them (the registry's RequestOrigin). */
export interface EgressOrigin {
  scheme: 'http' | 'https';
  host: string;
  port: number;
}

export interface EgressProxyHandle {
  /** What sandboxes get as HTTP_PROXY / HTTPS_PROXY. */
  url: string;
  /**
   * The CA bundle sandboxes trust (PEM) when the proxy terminates HTTPS for credential rules;
   * the driver mounts it and points SSL_CERT_FILE and friends at it.
   */
  caBundle?: string;
  disconnect(address: string): void;
  close(): Promise<void>;
}
