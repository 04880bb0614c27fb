/**
 * Docker driver (dockerode): one throwaway container per call, taken from a warm pool of
 * pre-started containers whose entrypoint waits for the call on stdin. Loaded only through
 * the `@toolgate/sandbox/docker` subpath or createSandbox()'s dynamic import.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import { Writable, type Duplex } from 'node:stream';
import Docker from 'dockerode';
import type { SandboxConfig } from './config.js';
import { CHANNEL_DIR, ChannelListener, makeChannelDir, removeChannelDir } from './channel.js';
import { ExitMarkerScanner, encodeEnvelope, type ExitReport } from './envelope.js';
import { SandboxError } from './errors.js';
import { SlotMounts } from './mounts.js';
import { seccompProfileJson } from './seccomp.js';
import {
  DockerReaper,
  LABEL,
  LABEL_CREATED,
  LABEL_DEPLOYMENT,
  LABEL_HOST,
  LABEL_IMAGE,
  LABEL_LONG_LIVED,
  LABEL_OWNER,
  LABEL_PID,
} from './docker-reaper.js';
import { LABEL_COMPOSE_PROJECT, ownComposeProject } from './docker-leftovers.js';
import { EgressNetwork, SANDBOX_CA_FILE, caEnv } from './egress.js';
import { BoundedOutput, ProcessHandle, prepareOpen } from './process.js';
import { defaultOwnerId, prepareRun, silentLogger, type PreparedRun } from './run-request.js';
import type {
  DriverOptions,
  EgressCredentials,
  EgressMeter,
  OpenRequest,
  ResourceLimits,
  RunRequest,
  RunResult,
  SandboxDriver,
  SandboxLogger,
  SandboxProcess,
  SandboxStats,
} from './types.js';
import { WarmPool } from './warm-pool.js';
import { RunWatchdog } from './watchdog.js';
import { SANDBOX_GID, SANDBOX_UID, WORKSPACE_MOUNT } from './workspaces.js';

export {
  LABEL,
  LABEL_CREATED,
  LABEL_DEPLOYMENT,
  LABEL_HOST,
  LABEL_IMAGE,
  LABEL_LONG_LIVED,
  LABEL_OWNER,
  LABEL_PID,
} from './docker-reaper.js';
export {
  LABEL_COMPOSE_PROJECT,
  STOPPED_LEFTOVER_MS,
  dockerEngine,
  findLeftovers,
  ownComposeProject,
  removeLeftovers,
  type Leftover,
} from './docker-leftovers.js';

const MiB = 1024 * 1024;

/** A started container blocked in its entrypoint, waiting for one call. */
interface Armed {
  key: string;
  container: Docker.Container;
  stream: Duplex;
  /**
   * Resolves once the attach stream has ended: the container's processes are gone and all their
   * output is in. Watching the stream, not a wait request per container, saves one Docker API
   * round trip per container; the exit status is asked for only when a call needs it.
   */
  ended: Promise<void>;
  onStdout: (b: Buffer) => void;
  onStderr: (b: Buffer) => void;
  /** Empty slot directory mounted at /workspace (pooled containers). */
  slot: string | undefined;
  /** This container's own directory at CHANNEL_DIR, where a code-mode call's socket goes. */
  channelDir: string;
  /** Its address on the egress network (network-enabled containers), known to the proxy. */
  address: string | undefined;
  createdAt: number;
  dead: boolean;
}

export class DockerDriver implements SandboxDriver {
  readonly name = 'docker' as const;
  private readonly docker: Docker;
  private readonly log: SandboxLogger;
  private readonly owner: string;
  private readonly deployment: string;
  private readonly mounts: SlotMounts;
  private readonly pools = new Map<string, WarmPool<Armed>>();
  private readonly reaper: DockerReaper;
  /** Every container this driver created and has not removed yet. */
  private readonly live = new Set<string>();
  /** Long-lived sandboxes (open()) still running. */
  private readonly processes = new Set<ProcessHandle>();
  private readonly missingImages = new Set<string>();
  private propagation = false;
  /** The egress network and filter of network-enabled sandboxes (sandbox.allowNetwork). */
  private egress: EgressNetwork | undefined;
  private egressUnavailable: string | undefined;
  private started: Promise<void> | undefined;
  /** The compose project this worker runs in, labelled on its containers (docker-leftovers.ts). */
  private composeProject: string | undefined;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private running = 0;
  private slotSeq = 0;

  constructor(
    private readonly config: SandboxConfig,
    private readonly options: DriverOptions = {},
  ) {
    this.docker = new Docker({ socketPath: config.docker.socketPath });
    this.log = options.logger ?? silentLogger;
    this.owner = options.ownerId ?? defaultOwnerId();
    this.deployment = createHash('sha256')
      .update(`${hostname()}:${path.resolve(config.stateDir)}`)
      .digest('hex')
      .slice(0, 16);
    this.mounts = new SlotMounts(config.stateDir);
    for (const key of Object.keys(config.images)) {
      this.pools.set(
        key,
        new WarmPool<Armed>({
          key,
          size: config.pool.sizes[key] ?? config.pool.size,
          start: () => this.arm(key, this.defaultResources(), { pooled: true }),
          dispose: (armed) => this.dispose(armed),
          canStart: () => !this.closed && !this.missingImages.has(key),
          onStartFailed: (err) =>
            this.log.error({ err, image: key }, 'sandbox container failed to start'),
        }),
      );
    }
    this.reaper = new DockerReaper({
      docker: this.docker,
      config,
      owner: this.owner,
      deployment: this.deployment,
      mounts: this.mounts,
      isOwnerAlive: options.isOwnerAlive,
      isLive: (id) => this.live.has(id),
      removeContainer: (container) => this.removeContainer(container),
      log: this.log,
    });
  }

  /** Whether a Docker engine answers on the configured socket. */
  static async available(socketPath: string, timeoutMs = 1500): Promise<boolean> {
    const docker = new Docker({ socketPath, timeout: timeoutMs });
    try {
      await docker.ping();
      return true;
    } catch {
      return false;
    }
  }

  /** The deployment label value of this driver's containers (see LABEL_DEPLOYMENT). */
  get deploymentId(): string {
    return this.deployment;
  }

  get ownerId(): string {
    return this.owner;
  }

  start(): Promise<void> {
    this.started ??= this.doStart();
    return this.started;
  }

  private async doStart(): Promise<void> {
    try {
      await this.docker.ping();
    } catch (err) {
      throw new SandboxError(
        'driver_unavailable',
        `Docker does not answer on ${this.config.docker.socketPath}`,
        { cause: err },
      );
    }
    for (const [key, image] of Object.entries(this.config.images)) {
      try {
        await this.docker.getImage(image.docker).inspect();
      } catch {
        this.missingImages.add(key);
        this.log.warn(
          { image: image.docker, key },
          'sandbox image missing; run scripts/sandbox/build-images.sh',
        );
      }
    }
    // Under Compose, its project goes on every container: once the project is down, its
    // leftovers are recognisable from any host process (`toolgate sandbox prune`).
    this.composeProject = await ownComposeProject(this.docker);
    // Heartbeat first: setup registers our slot directory, which a reaper must see as alive.
    await this.reaper.heartbeat();
    this.propagation = await this.mounts.setup(this.owner);
    if (this.config.allowNetwork) await this.startEgress();
    if (!this.propagation) {
      this.log.warn(
        { stateDir: this.config.stateDir },
        'no shared mount for workspace slots; calls with a workspace start a container each',
      );
    }
    await this.reap();
    this.timer = setInterval(() => {
      void this.reaper
        .heartbeat()
        .then(() => this.reap())
        .then(() => this.recycleIdle())
        .catch((err: unknown) => this.log.warn({ err }, 'sandbox reaper failed'));
    }, this.config.reaper.intervalMs);
    this.timer.unref();
    for (const pool of this.pools.values()) pool.topUp();
  }

  /**
   * Network-enabled sandboxes go through the egress filter or not at all: without a working
   * filter their calls are refused with the reason, never given an open bridge.
   */
  private async startEgress(): Promise<void> {
    const start = this.options.startEgressProxy;
    if (!start) {
      this.egressUnavailable = 'no egress filter is configured for this worker';
      return;
    }
    try {
      this.egress = await EgressNetwork.create(
        this.docker,
        { [LABEL]: '1', [LABEL_OWNER]: this.owner, [LABEL_DEPLOYMENT]: this.deployment },
        this.owner,
        start,
        this.config.stateDir,
      );
      this.log.info(
        { network: this.egress.info.name, proxy: this.egress.info.proxyUrl },
        'egress filter ready for network-enabled sandboxes',
      );
    } catch (err) {
      this.egressUnavailable = `the egress filter could not start: ${(err as Error).message}`;
      this.log.error({ err }, 'egress filter could not start; network-enabled calls are refused');
    }
  }

  /** Resolves once every pool holds its target number of warm containers (bench, tests). */
  async warmUp(timeoutMs = 60_000): Promise<void> {
    await this.start();
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const short = [...this.pools.values()].some(
        (p) => !this.missingImages.has(p.key) && p.readyCount < p.size,
      );
      if (!short) return;
      if (Date.now() > deadline)
        throw new SandboxError('start_failed', 'warm pool did not fill in time');
      await sleep(20);
    }
  }

  stats(): SandboxStats {
    const warm: Record<string, number> = {};
    for (const [key, pool] of this.pools) warm[key] = pool.readyCount;
    return {
      driver: 'docker',
      warm,
      running: this.running,
      reaped: this.reaper.reaped,
      processes: this.processes.size,
    };
  }

  async run(request: RunRequest): Promise<RunResult> {
    const startedAt = performance.now();
    if (this.closed) throw new SandboxError('closed', 'sandbox driver is closed');
    const prepared = prepareRun(this.config, request);
    await this.start();
    if (this.missingImages.has(prepared.key)) {
      throw new SandboxError(
        'driver_unavailable',
        `sandbox image "${prepared.image.docker}" is not built; run scripts/sandbox/build-images.sh`,
      );
    }
    prepared.signal?.throwIfAborted?.();
    this.running++;
    try {
      return await this.execute(prepared, startedAt);
    } finally {
      this.running--;
    }
  }

  /**
   * A container of its own (never a warm one: its limits and labels are for a whole life),
   * whose entrypoint is handed the program without an exit report, so it execs it under tini:
   * signals sent to the container reach the program, and its stdin stays the attach stream's.
   */
  async open(request: OpenRequest): Promise<SandboxProcess> {
    if (this.closed) throw new SandboxError('closed', 'sandbox driver is closed');
    const req = prepareOpen(this.config, request);
    await this.start();
    if (this.missingImages.has(req.key)) {
      throw new SandboxError(
        'driver_unavailable',
        `sandbox image "${req.image.docker}" is not built; run scripts/sandbox/build-images.sh`,
      );
    }
    if (req.network && !this.egress) {
      throw new SandboxError(
        'invalid_request',
        `network access is unavailable: ${this.egressUnavailable ?? 'sandbox.allowNetwork is off'}`,
      );
    }
    if (req.signal?.aborted)
      throw new SandboxError('aborted', 'the sandbox was cancelled before it started');
    const armed = await this.arm(req.key, req.resources, {
      network: req.network,
      workspace: req.workspace,
      clientId: req.clientId,
      longLived: true,
    });
    if (this.closed || req.signal?.aborted) {
      await this.dispose(armed);
      throw this.closed
        ? new SandboxError('closed', 'sandbox driver is closed')
        : new SandboxError('aborted', 'the sandbox was cancelled while it started');
    }

    // Docker's attach stream carries both outputs: a reader behind on either pauses both.
    let paused = false;
    const demand = () => {
      if (paused && !stdout.behind && !stderr.behind) {
        paused = false;
        armed.stream.resume();
      }
    };
    const stdout = new BoundedOutput(req.outputBufferBytes, demand);
    const stderr = new BoundedOutput(req.outputBufferBytes, demand);
    const feed = (out: BoundedOutput) => (b: Buffer) => {
      if (!out.feed(b) && !paused) {
        paused = true;
        armed.stream.pause();
      }
    };
    armed.onStdout = feed(stdout);
    armed.onStderr = feed(stderr);
    // No nonce: the entrypoint execs the program, which then owns the rest of stdin.
    armed.stream.write(encodeEnvelope(req.argv));
    const stdin = new Writable({
      write: (chunk: Buffer, _enc, done) => {
        armed.stream.write(chunk, (err) => done(err ?? null));
      },
      // Half-closes the attach stream: the container's stdin (StdinOnce) reaches EOF.
      final: (done) => {
        armed.stream.end();
        done();
      },
    });
    const container = armed.container;
    const handle = new ProcessHandle(
      'docker',
      stdin,
      stdout,
      stderr,
      {
        // To tini (PID 1), which passes it on to its one child, the program.
        signal: (name) => container.kill({ signal: name }).then(() => undefined),
        destroy: () => this.dispose(armed),
        memoryBytes: () => containerMemoryBytes(container.id),
      },
      req.signal,
      () => this.processes.delete(handle),
    );
    this.processes.add(handle);
    void (async () => {
      const status = await exitStatus(container);
      // The last output is still on its way through the attach stream (unless nobody reads it).
      await Promise.race([armed.ended, sleep(2000)]);
      const info = await container.inspect().catch(() => undefined);
      await handle.ended({
        exitCode: status >= 0 ? status : (info?.State?.ExitCode ?? 137),
        oomKilled: info?.State?.OOMKilled ?? false,
      });
    })();
    return handle;
  }

  private async execute(req: PreparedRun, startedAt: number): Promise<RunResult> {
    const t0 = performance.now();
    if (req.network && !this.egress) {
      throw new SandboxError(
        'invalid_request',
        `network access is unavailable: ${this.egressUnavailable ?? 'sandbox.allowNetwork is off'}`,
      );
    }
    const pool = this.pools.get(req.key)!;
    const poolable =
      pool.size > 0 &&
      !req.network &&
      req.defaultResources &&
      (req.workspace === undefined || this.propagation);
    let armed: Armed;
    let warm = false;
    // What the egress proxy relays for this run (never a pooled one: network runs start their
    // own container), counted here and told to the caller as it goes.
    let egressBytes = 0;
    const meter: EgressMeter | undefined = req.network
      ? {
          add: (bytes) => {
            egressBytes += bytes;
            try {
              req.onEgress?.(bytes);
            } catch {
              // A throwing callback is ignored, as onOutput's is.
            }
          },
        }
      : undefined;
    if (poolable) {
      warm = pool.readyCount > 0;
      armed = await pool.acquire(req.signal);
    } else {
      armed = await this.arm(req.key, req.resources, {
        network: req.network,
        workspace: req.workspace,
        clientId: req.clientId,
        credentials: req.credentials,
        meter,
      });
    }
    const checkedOut = performance.now();

    let killing: Promise<void> | undefined;
    let killed: () => void = () => undefined;
    const wasKilled = new Promise<void>((resolve) => (killed = resolve));
    const watch = new RunWatchdog(
      req,
      (cancelled) => {
        killing = cancelled
          ? // Cancelled: nothing of the container is wanted any more; a forced removal kills
            // and removes in one engine call (no OOM verdict or last output to read first).
            this.removeContainer(armed.container)
          : armed.container.kill({ signal: 'SIGKILL' }).catch(() => undefined);
        void killing.then(killed);
      },
      t0,
    );
    // The entrypoint reports the exit on both streams; once both lines are in, the call is over.
    const nonce = randomBytes(12).toString('hex');
    const outScan = new ExitMarkerScanner(nonce, watch.onStdout);
    const errScan = new ExitMarkerScanner(nonce, watch.onStderr);
    let reported: (r: ExitReport) => void = () => undefined;
    const exitReport = new Promise<ExitReport>((resolve) => (reported = resolve));
    let firstReport = 0;
    let channel: ChannelListener | undefined;
    const scan = (scanner: ExitMarkerScanner) => (b: Buffer) => {
      scanner.push(b);
      if (!firstReport && (outScan.report || errScan.report)) firstReport = performance.now();
      if (outScan.report && errScan.report) reported(errScan.report);
    };
    armed.onStdout = scan(outScan);
    armed.onStderr = scan(errScan);

    try {
      if (armed.dead)
        throw new SandboxError('start_failed', 'sandbox container stopped before its call');
      if (armed.slot && req.workspace) await this.mounts.bind(req.workspace, armed.slot);
      if (req.channel) channel = await ChannelListener.open(armed.channelDir, req.channel);
      const mounted = performance.now();
      armed.stream.end(encodeEnvelope(req.argv, req.stdin, nonce));
      const stopped = async () => ({
        inBand: false as const,
        exitCode: await exitStatus(armed.container),
        oomKills: 0,
      });
      const outcome = await Promise.race([
        exitReport.then((r) => ({ inBand: true as const, ...r })),
        armed.ended.then(stopped),
        // Killed by the watchdog: Docker's verdict, even if the stream were slow to end.
        wasKilled.then(stopped),
      ]);
      // Cancelled: the container is dead, its output no longer wanted; removal runs below.
      watch.throwIfAborted();
      let exitCode = outcome.exitCode;
      let oomKilled = outcome.oomKills > 0 && exitCode === 137;
      if (!outcome.inBand) {
        // Killed (timeout, flood, abort) or the entrypoint itself died: Docker has the verdict,
        // and the attach stream carries the last output until it ends.
        await Promise.race([armed.ended, sleep(2000)]);
        outScan.flush();
        errScan.flush();
        if (exitCode === 137 && !watch.killedByLimit && !watch.aborted) {
          const info = await armed.container.inspect().catch(() => undefined);
          oomKilled = info?.State?.OOMKilled ?? false;
        }
      }
      if (exitCode < 0) exitCode = 137;
      watch.throwIfAborted();
      // The program has ended: whatever its sandbox still holds open (a process left in the
      // background) is cut now, so nothing is relayed for this run after its count is read.
      if (armed.address) this.egress?.release(armed.address);
      const collected = performance.now();
      const reportedAt = firstReport || collected;
      const result = watch.result('docker', { exitCode, oomKilled, warm }, this.options.hooks, {
        startedAt,
        checkoutMs: checkedOut - startedAt,
        mountMs: mounted - checkedOut,
        execMs: reportedAt - mounted,
        collectMs: collected - reportedAt,
      });
      return meter ? { ...result, egressBytes } : result;
    } catch (err) {
      watch.kill();
      throw err;
    } finally {
      watch.dispose();
      await channel?.close();
      // Output in: the replacement starts now, off this call's path (WarmPool.acquire).
      if (poolable) pool.refill();
      void (killing ?? Promise.resolve()).then(() => this.dispose(armed));
    }
  }

  private defaultResources(): ResourceLimits {
    const { memoryMb, cpus, pids, fileSizeMb, tmpfsMb } = this.config.limits;
    return { memoryMb, cpus, pids, fileSizeMb, tmpfsMb };
  }

  /** Creates, attaches and starts one container whose entrypoint then waits for its call. */
  private async arm(
    key: string,
    limits: ResourceLimits,
    how: {
      pooled?: boolean;
      network?: boolean;
      workspace?: string | undefined;
      clientId?: string | undefined;
      credentials?: EgressCredentials | undefined;
      /** Where the proxy counts the bytes it relays for this container's run. */
      meter?: EgressMeter | undefined;
      /** open(): exempt from reaper.maxAgeMs while its owner lives. */
      longLived?: boolean;
    },
  ): Promise<Armed> {
    const t0 = performance.now();
    const image = this.config.images[key]!;
    let slot: string | undefined;
    let source: string | undefined = how.workspace;
    if (how.pooled && this.propagation) {
      slot = await this.mounts.createSlot(this.owner, `s${++this.slotSeq}`);
      source = slot;
    }
    const memory = limits.memoryMb * MiB;
    const fsize = limits.fileSizeMb * MiB;
    const egressNetwork = how.network ? this.egress : undefined;
    const egress = egressNetwork?.info;
    if (how.network && !egress) {
      if (slot) await this.mounts.releaseSlot(slot);
      throw new SandboxError('invalid_request', 'network access is unavailable');
    }
    const channelDir = await makeChannelDir(this.config.stateDir, this.owner);
    let container: Docker.Container;
    try {
      container = await this.docker.createContainer({
        Image: image.docker,
        User: `${SANDBOX_UID}:${SANDBOX_GID}`,
        // Replaces the image's env: nothing of the worker's environment gets in.
        Env: [
          'PATH=/usr/local/bin:/usr/bin:/bin',
          'HOME=/tmp',
          'LANG=C.UTF-8',
          'TMPDIR=/tmp',
          ...(egress ? proxyEnv(egress.proxyUrl) : []),
          ...(egress?.caFile ? caEnv() : []),
          // A warm python container starts its interpreter while it waits (toolgate-entry).
          ...(how.pooled && key === 'python' ? ['TOOLGATE_PRELOAD=python3'] : []),
        ],
        WorkingDir: WORKSPACE_MOUNT,
        OpenStdin: true,
        StdinOnce: true,
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
        NetworkDisabled: !egress,
        Hostname: 'sandbox',
        Labels: {
          [LABEL]: '1',
          [LABEL_OWNER]: this.owner,
          [LABEL_CREATED]: String(Date.now()),
          [LABEL_IMAGE]: key,
          [LABEL_HOST]: hostname(),
          [LABEL_PID]: String(process.pid),
          [LABEL_DEPLOYMENT]: this.deployment,
          ...(how.longLived ? { [LABEL_LONG_LIVED]: '1' } : {}),
          ...(this.composeProject ? { [LABEL_COMPOSE_PROJECT]: this.composeProject } : {}),
        },
        HostConfig: {
          NetworkMode: egress ? egress.name : 'none',
          ReadonlyRootfs: true,
          Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${limits.tmpfsMb}m,mode=1777` },
          CapDrop: ['ALL'],
          // The policy the bwrap driver also loads: Docker's default minus ptrace and a few more.
          SecurityOpt: ['no-new-privileges', `seccomp=${seccompProfileJson()}`],
          Memory: memory,
          MemorySwap: memory,
          NanoCpus: Math.round(limits.cpus * 1e9),
          PidsLimit: limits.pids,
          Ulimits: [
            { Name: 'fsize', Soft: fsize, Hard: fsize },
            { Name: 'core', Soft: 0, Hard: 0 },
            { Name: 'nofile', Soft: 1024, Hard: 1024 },
          ],
          // tini as PID 1: reaps zombies, and its exit (when the program exits) ends every process.
          Init: true,
          IpcMode: 'private',
          LogConfig: { Type: 'none', Config: {} },
          ...(this.config.docker.runtime ? { Runtime: this.config.docker.runtime } : {}),
          Mounts: [
            ...(source
              ? [
                  {
                    Type: 'bind' as const,
                    Source: source,
                    Target: WORKSPACE_MOUNT,
                    ReadOnly: false,
                    ...(slot ? { BindOptions: { Propagation: 'rslave' as const } } : {}),
                  },
                ]
              : []),
            // What the sandbox's TLS clients trust: the public roots and the egress CA.
            ...(egress?.caFile
              ? [
                  {
                    Type: 'bind' as const,
                    Source: egress.caFile,
                    Target: SANDBOX_CA_FILE,
                    ReadOnly: true,
                  },
                ]
              : []),
            // Read-only: connecting to a socket needs no write access to its filesystem.
            { Type: 'bind' as const, Source: channelDir, Target: CHANNEL_DIR, ReadOnly: true },
          ],
        },
      });
    } catch (err) {
      if (slot) await this.mounts.releaseSlot(slot);
      await removeChannelDir(channelDir);
      throw err;
    }
    this.live.add(container.id);
    let address: string | undefined;
    try {
      const stream = (await container.attach({
        stream: true,
        stdin: true,
        stdout: true,
        stderr: true,
        hijack: true,
      })) as unknown as Duplex;
      const armed: Armed = {
        key,
        container,
        stream,
        ended: new Promise<void>((resolve) => {
          stream.once('end', resolve);
          stream.once('close', resolve);
          stream.once('error', () => resolve());
        }).then(() => {
          armed.dead = true;
        }),
        onStdout: () => undefined,
        onStderr: () => undefined,
        slot,
        channelDir,
        address: undefined,
        createdAt: Date.now(),
        dead: false,
      };
      demux(
        stream,
        (b) => armed.onStdout(b),
        (b) => armed.onStderr(b),
      );
      stream.on('error', () => undefined);
      await container.start();
      if (egressNetwork) {
        // Known to the proxy before the program runs (it waits for its call on stdin).
        address = armed.address = await this.egressAddress(container, egressNetwork.info.name);
        egressNetwork.admit(address, how.clientId, how.credentials, how.meter);
      }
      this.options.hooks?.onStart?.({
        image: key,
        driver: 'docker',
        durationMs: performance.now() - t0,
        pooled: how.pooled ?? false,
      });
      return armed;
    } catch (err) {
      if (address) egressNetwork?.release(address);
      await this.removeContainer(container);
      if (slot) await this.mounts.releaseSlot(slot);
      await removeChannelDir(channelDir);
      throw new SandboxError(
        'start_failed',
        `sandbox container failed to start: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }

  /** A container's address on the egress network. */
  private async egressAddress(container: Docker.Container, network: string): Promise<string> {
    const info = await container.inspect();
    const address = info.NetworkSettings.Networks[network]?.IPAddress;
    if (!address) throw new Error(`the container has no address on ${network}`);
    return address;
  }

  /** Off the call path: remove the container, then unmount and drop its slot. */
  private async dispose(armed: Armed): Promise<void> {
    armed.stream.destroy();
    // Forgotten before the container goes: Docker may give its address to the next one.
    if (armed.address) this.egress?.release(armed.address);
    await this.removeContainer(armed.container);
    if (armed.slot) await this.mounts.releaseSlot(armed.slot);
    await removeChannelDir(armed.channelDir);
  }

  private async removeContainer(container: Docker.Container): Promise<void> {
    try {
      await container.remove({ force: true, v: true });
    } catch (err) {
      const status = (err as { statusCode?: number }).statusCode;
      // 404: already gone; 409: removal already in progress.
      if (status !== 404 && status !== 409)
        this.log.warn({ err, id: container.id }, 'sandbox container removal failed');
    }
    this.live.delete(container.id);
  }

  /** Warm containers past maxIdleMs are replaced, so none lingers for days. */
  private async recycleIdle(): Promise<void> {
    for (const pool of this.pools.values()) await pool.recycle(this.config.pool.maxIdleMs);
  }

  async drainWarm(): Promise<void> {
    await Promise.all([...this.pools.values()].map((pool) => pool.drain()));
  }

  /** The reaper's pass (see docker-reaper.ts); also run out of turn when a worker dies. */
  reap(): Promise<number> {
    return this.reaper.reap();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await Promise.all([...this.processes].map((p) => p.kill()));
    await Promise.all([...this.pools.values()].map((pool) => pool.close()));
    // Containers of calls still running, or being started for the pool.
    for (let i = 0; i < 50 && this.live.size > 0; i++) {
      await Promise.all(
        [...this.live].map((id) => this.removeContainer(this.docker.getContainer(id))),
      );
      await sleep(100);
    }
    await this.egress?.close();
    await this.mounts.removeOwner(this.owner);
    if (this.propagation) await this.mounts.teardownIfUnused();
    this.mounts.close();
    await this.reaper.removeHeartbeat();
  }
}

/** Docker's multiplexed attach stream: 8-byte header (stream type, size) then the payload. */
function demux(stream: Duplex, out: (b: Buffer) => void, err: (b: Buffer) => void): void {
  let pending: Buffer = Buffer.alloc(0);
  stream.on('data', (chunk: Buffer) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 8) {
      const size = pending.readUInt32BE(4);
      if (pending.length < 8 + size) break;
      const payload = pending.subarray(8, 8 + size);
      if (pending[0] === 2) err(payload);
      else out(payload);
      pending = pending.subarray(8 + size);
    }
  });
}

/** A stopped container's exit status (wait returns at once); -1 when Docker has none (removed). */
async function exitStatus(container: Docker.Container): Promise<number> {
  try {
    return ((await container.wait()) as { StatusCode: number }).StatusCode;
  } catch {
    return -1;
  }
}

/**
 * The container's memory use from its cgroup on this host (cgroup v1, then v2 under systemd or
 * cgroupfs): a file read, where Docker's stats API takes a second or more. Undefined when the
 * worker cannot see the host's cgroups (it runs in a container itself).
 */
async function containerMemoryBytes(id: string): Promise<number | undefined> {
  for (const file of [
    `/sys/fs/cgroup/memory/docker/${id}/memory.usage_in_bytes`,
    `/sys/fs/cgroup/system.slice/docker-${id}.scope/memory.current`,
    `/sys/fs/cgroup/docker/${id}/memory.current`,
  ]) {
    const text = await readFile(file, 'utf8').catch(() => undefined);
    if (text !== undefined && /^\d+\s*$/.test(text)) return Number(text);
  }
  return undefined;
}

/** Both spellings: curl reads the lower-case ones, most other programs either. */
function proxyEnv(url: string): string[] {
  return ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy', 'ALL_PROXY'].map(
    (name) => `${name}=${url}`,
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
