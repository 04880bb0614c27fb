/**
 * bubblewrap driver, for hosts without a Docker engine: the same image rootfs (exported by
 * scripts/sandbox/build-images.sh) mounted read-only, every namespace unshared (no network),
 * a per-call cgroup for memory/pids/CPU (rlimits when cgroups are out of reach), the sandbox
 * uid, a clean environment, no nested user namespaces, and the seccomp filter the docker driver
 * also applies (seccomp.ts). bwrap itself starts fast; what a small pool of pre-started
 * launchers takes off the call path is joining the call's cgroup.
 */
import { spawn, execFile, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { access, readFile, readdir, stat, constants as fsConstants } from 'node:fs/promises';
import { constants } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { SandboxConfig } from './config.js';
import {
  CallCgroup,
  detectCgroups,
  reapDeadWorkers,
  removeStaleCgroups,
  type CgroupMode,
} from './cgroup.js';
import {
  CHANNEL_DIR,
  ChannelListener,
  makeChannelDir,
  reapChannelDirs,
  removeChannelDir,
} from './channel.js';
import { encodeEnvelope } from './envelope.js';
import { SandboxError } from './errors.js';
import { RunWatchdog } from './watchdog.js';
import { loadSeccompFilter } from './seccomp.js';
import { BoundedOutput, ProcessHandle, prepareOpen } from './process.js';
import {
  defaultOwnerGone,
  defaultOwnerId,
  prepareRun,
  silentLogger,
  type PreparedRun,
} from './run-request.js';
import type {
  DriverOptions,
  OpenRequest,
  ResourceLimits,
  RunRequest,
  RunResult,
  SandboxDriver,
  SandboxLogger,
  SandboxProcess,
  SandboxStats,
} from './types.js';
import { SANDBOX_GID, SANDBOX_UID, WORKSPACE_MOUNT } from './workspaces.js';

const MiB = 1024 * 1024;
/** The launcher's fd carrying the seccomp BPF to bwrap (`--seccomp 4`); fd 3 is the status. */
const SECCOMP_FD = 4;
const BASE_ENV: Record<string, string> = {
  PATH: '/usr/local/bin:/usr/bin:/bin',
  HOME: '/tmp',
  LANG: 'C.UTF-8',
  TMPDIR: '/tmp',
};

/**
 * The one shell between the worker and bwrap, started ahead of the call: joins the call's
 * cgroups (the arguments before "--"; moving a process between cgroups costs a ~15 ms RCU grace
 * period, which this takes off the call path), sets the rlimits, then waits for the call on
 * stdin in the same envelope format the container entrypoint reads ("TOOLGATE1 <argc>\n", the
 * NUL-terminated arguments, then the program's stdin) and execs it.
 */
function launcherScript(ulimits: string[]): string {
  const limits = ulimits.map((u) => `ulimit ${u} || exit 126; `).join('');
  return (
    'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 126; shift; done; shift; ' +
    limits +
    'IFS=" " read -r magic argc _ || exit 125; [ "$magic" = TOOLGATE1 ] || exit 125; args=(); ' +
    'for ((i = 0; i < argc; i++)); do IFS= read -r -d "" a || exit 125; args+=("$a"); done; ' +
    'exec "${args[@]}"'
  );
}

/** A started launcher: its cgroup joined, its pipes open, waiting for a call. */
interface Launcher {
  child: ChildProcessByStdio<Writable, Readable, Readable>;
  cgroup: CallCgroup | undefined;
  status: () => string;
  closed: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  createdAt: number;
}

export class BwrapDriver implements SandboxDriver {
  readonly name = 'bwrap' as const;
  private readonly log: SandboxLogger;
  /** Names this worker's channel directories, so a reaper can tell when they are leftovers. */
  private readonly owner: string;
  private started: Promise<void> | undefined;
  private cgroups: CgroupMode = 'none';
  private readonly rootfs = new Map<string, { dir: string; env: Record<string, string> }>();
  private readonly missing = new Set<string>();
  private readonly children = new Set<() => void>();
  /** Long-lived sandboxes (open()) still running. */
  private readonly processes = new Set<ProcessHandle>();
  private reaper: NodeJS.Timeout | undefined;
  private reapedCount = 0;
  private running = 0;
  private closed = false;
  private readonly launchers: Launcher[] = [];
  private filling = 0;
  private asRoot = process.getuid?.() === 0;
  /** The compiled filter, loaded once at start; undefined only when configured off. */
  private seccomp: Buffer | undefined;
  /** bwrap ≥ 0.8.0 has --disable-userns; older ones rely on the filter alone for that. */
  private disableUserns = true;

  constructor(
    private readonly config: SandboxConfig,
    private readonly options: DriverOptions = {},
  ) {
    this.log = options.logger ?? silentLogger;
    this.owner = options.ownerId ?? defaultOwnerId();
  }

  /** Whether bwrap is installed and can create its namespaces here. */
  static async available(): Promise<boolean> {
    try {
      await promisify(execFile)('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], {
        timeout: 5000,
      });
      return true;
    } catch {
      return false;
    }
  }

  start(): Promise<void> {
    this.started ??= this.doStart();
    return this.started;
  }

  private async doStart(): Promise<void> {
    if (!(await BwrapDriver.available())) {
      throw new SandboxError(
        'driver_unavailable',
        'bubblewrap (bwrap) is not installed or cannot create namespaces here',
      );
    }
    if (this.config.bwrap.seccomp) {
      this.seccomp = await loadSeccompFilter(this.config.bwrap.seccompFilter);
    } else {
      this.log.warn(
        {},
        'sandbox.bwrap.seccomp is false: bwrap sandboxes run without a seccomp filter (keyctl, bpf, perf_event_open, ptrace reachable)',
      );
    }
    const version = await bwrapVersion();
    this.disableUserns = version !== undefined && compareVersions(version, [0, 8, 0]) >= 0;
    if (!this.disableUserns) {
      this.log.warn(
        { version: version?.join('.') ?? 'unknown' },
        this.seccomp
          ? 'bwrap older than 0.8.0 has no --disable-userns: only the seccomp filter refuses new user namespaces'
          : 'bwrap older than 0.8.0 and no seccomp filter: sandboxes can create user namespaces',
      );
    }
    this.cgroups = await detectCgroups();
    if (this.cgroups === 'none') {
      this.log.warn(
        {},
        'no writable cgroups: bwrap sandboxes are limited by rlimits only (no CPU limit, memory as address space)',
      );
    }
    for (const [key, image] of Object.entries(this.config.images)) {
      const dir = path.resolve(image.rootfs);
      try {
        await access(path.join(dir, 'usr/bin'), fsConstants.R_OK);
        this.rootfs.set(key, { dir, env: await readImageEnv(dir) });
      } catch {
        this.missing.add(key);
        this.log.warn(
          { key, rootfs: dir },
          'sandbox rootfs missing; run scripts/sandbox/build-images.sh',
        );
      }
    }
    await removeStaleCgroups(this.cgroups);
    await this.reap();
    if (this.closed) return;
    // A sandbox that outlived its dead worker (long-lived ones above all) goes within an interval.
    this.reaper = setInterval(
      () => void this.reap().catch(() => undefined),
      this.config.reaper.intervalMs,
    );
    this.reaper.unref();
    this.refill();
  }

  async warmUp(timeoutMs = 10_000): Promise<void> {
    await this.start();
    this.refill();
    const deadline = Date.now() + timeoutMs;
    while (this.launchers.length < this.config.pool.size && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  stats(): SandboxStats {
    // Launchers serve every image: one shared count.
    return {
      driver: 'bwrap',
      warm: { '*': this.launchers.length },
      running: this.running,
      reaped: this.reapedCount,
      processes: this.processes.size,
    };
  }

  async run(request: RunRequest): Promise<RunResult> {
    if (this.closed) throw new SandboxError('closed', 'sandbox driver is closed');
    const req = prepareRun(this.config, request);
    await this.start();
    const fs = await this.checkRequest(req);
    req.signal?.throwIfAborted?.();
    this.running++;
    try {
      return await this.execute(req, fs);
    } finally {
      this.running--;
    }
  }

  /** The image's rootfs, once the request is one this driver can run. */
  private async checkRequest(
    req: PreparedRun,
  ): Promise<{ dir: string; env: Record<string, string> }> {
    const fs = this.rootfs.get(req.key);
    if (!fs) {
      throw new SandboxError(
        'driver_unavailable',
        `sandbox rootfs for "${req.key}" is not built; run scripts/sandbox/build-images.sh`,
      );
    }
    if (req.network)
      throw new SandboxError('invalid_request', 'the bwrap driver gives sandboxes no network');
    if (req.workspace !== undefined) {
      const st = await stat(req.workspace).catch(() => undefined);
      if (!st?.isDirectory())
        throw new SandboxError('invalid_request', `workspace ${req.workspace} is not a directory`);
    }
    return fs;
  }

  /**
   * A launcher (a warm one when the limits are the defaults) handed the program; its cgroup
   * holds the limits for the sandbox's whole life. Resolves once bwrap reports the sandbox up.
   */
  async open(request: OpenRequest): Promise<SandboxProcess> {
    const t0 = performance.now();
    if (this.closed) throw new SandboxError('closed', 'sandbox driver is closed');
    const req = prepareOpen(this.config, request);
    await this.start();
    const fs = await this.checkRequest(req);
    if (req.signal?.aborted)
      throw new SandboxError('aborted', 'the sandbox was cancelled before it started');
    const pooled = req.defaultResources ? this.takeLauncher() : undefined;
    const launcher = pooled ?? (await this.spawnLauncher(req.resources));
    const { child, cgroup } = launcher;
    const killGroup = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // group already gone
      }
      void cgroup?.killAll();
    };
    this.children.add(killGroup);
    // Listeners before the first write: the launcher starts bwrap as soon as it has the program.
    // 'exit', not 'close': 'close' waits for stdout and stderr, which a reader may leave unread.
    const exit = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      void launcher.closed.then(() => resolve());
    });
    const statusFd = child.stdio[3] as Readable;
    const statusDone = new Promise<void>((resolve) => {
      statusFd.once('end', resolve);
      statusFd.once('close', resolve);
    });
    const started = new Promise<number | undefined>((resolve) => {
      // After spawnLauncher's own listener, so status() already holds this chunk.
      const check = () => {
        const m = /"child-pid"\s*:\s*(\d+)/.exec(launcher.status());
        if (m) resolve(Number(m[1]));
      };
      statusFd.on('data', check);
      void exit.then(() => resolve(undefined));
    });
    const ends = [child.stdout, child.stderr].map(
      (s) =>
        new Promise<void>((resolve) => {
          s.once('end', resolve);
          s.once('close', resolve);
        }),
    );
    const stdout = new BoundedOutput(req.outputBufferBytes, () => child.stdout.resume());
    const stderr = new BoundedOutput(req.outputBufferBytes, () => child.stderr.resume());
    // The start of stderr, for the message when bwrap itself fails.
    let firstErr = '';
    child.stdout.on('data', (b: Buffer) => {
      if (!stdout.feed(b)) child.stdout.pause();
    });
    child.stderr.on('data', (b: Buffer) => {
      if (firstErr.length < 4096) firstErr += b.toString('utf8');
      if (!stderr.feed(b)) child.stderr.pause();
    });
    const onAbort = () => killGroup();
    req.signal?.addEventListener('abort', onAbort, { once: true });
    child.stdin.write(encodeEnvelope(this.launchArgv(req, fs)));
    const init = await started;
    req.signal?.removeEventListener('abort', onAbort);
    if (init === undefined || this.closed || req.signal?.aborted) {
      killGroup();
      this.children.delete(killGroup);
      if (cgroup) void cgroup.killAll().then(() => cgroup.destroy());
      if (this.closed) throw new SandboxError('closed', 'sandbox driver is closed');
      if (req.signal?.aborted)
        throw new SandboxError('aborted', 'the sandbox was cancelled while it started');
      throw new SandboxError(
        'start_failed',
        `sandbox failed to start: ${firstErr.trim().slice(0, 500)}`,
      );
    }
    this.options.hooks?.onStart?.({
      image: req.key,
      driver: 'bwrap',
      durationMs: performance.now() - t0,
      pooled: false,
    });
    const handle = new ProcessHandle(
      'bwrap',
      child.stdin,
      stdout,
      stderr,
      {
        signal: async (name) => {
          const pid = await programPid(init, cgroup);
          if (pid === undefined) return;
          try {
            process.kill(pid, name);
          } catch {
            // ended meanwhile
          }
        },
        destroy: async () => {
          killGroup();
          await exit;
          await cgroup?.killAll();
          await cgroup?.destroy();
        },
        memoryBytes: async () => cgroup?.memoryBytes(),
      },
      req.signal,
      () => this.processes.delete(handle),
    );
    this.processes.add(handle);
    void (async () => {
      await exit;
      // bwrap wrote {"exit-code"} just before it exited; the pipes hold the last output.
      await Promise.race([Promise.all([statusDone, ...ends]), sleep(2000)]);
      // Anything the program left behind; the pid namespace died with its init, but be sure.
      await cgroup?.killAll();
      const oomKilled = (await cgroup?.oomKilled()) ?? false;
      const reported = /"exit-code"\s*:\s*(\d+)/.exec(launcher.status());
      const { code, signal } = await Promise.race([
        launcher.closed,
        sleep(100).then(() => ({ code: null, signal: 'SIGKILL' as NodeJS.Signals })),
      ]);
      this.children.delete(killGroup);
      await handle.ended({
        exitCode: reported
          ? Number(reported[1])
          : oomKilled
            ? 137
            : (code ?? 128 + signalNumber(signal)),
        oomKilled,
      });
    })();
    return handle;
  }

  private bwrapArgs(
    req: PreparedRun,
    fs: { dir: string; env: Record<string, string> },
    channelDir: string | undefined,
  ): string[] {
    const env = { ...fs.env, ...BASE_ENV };
    const args = [
      '--unshare-all',
      // A user namespace of its own in which no further one can be made (bwrap sets
      // user.max_user_namespaces to 1 inside): no `unshare -U` route to namespace-root
      // capabilities and the kernel code they reach. The seccomp filter refuses it as well.
      ...(this.disableUserns ? ['--unshare-user', '--disable-userns'] : []),
      '--die-with-parent',
      '--new-session',
      '--ro-bind',
      fs.dir,
      '/',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--size',
      String(req.resources.tmpfsMb * MiB),
      '--tmpfs',
      '/tmp',
      '--hostname',
      'sandbox',
      '--clearenv',
      ...Object.entries(env).flatMap(([k, v]) => ['--setenv', k, v]),
      '--uid',
      String(SANDBOX_UID),
      '--gid',
      String(SANDBOX_GID),
      '--cap-drop',
      'ALL',
      // {"child-pid"} once the sandbox is up, {"exit-code"} at the end: tells start failures apart.
      '--json-status-fd',
      '3',
    ];
    // Loaded last, just before the exec: the launcher wrote the BPF to this fd.
    if (this.seccomp) args.push('--seccomp', String(SECCOMP_FD));
    // The rootfs is read-only: /run becomes a tmpfs (not writable by the sandbox's uid) so the
    // channel's mount point can be made in it.
    if (channelDir !== undefined)
      args.push('--tmpfs', '/run', '--ro-bind', channelDir, CHANNEL_DIR);
    if (req.workspace !== undefined)
      args.push('--bind', req.workspace, WORKSPACE_MOUNT, '--chdir', WORKSPACE_MOUNT);
    else args.push('--chdir', '/tmp');
    args.push('--', ...req.argv);
    return args;
  }

  /** What the launcher execs: bwrap, under setpriv when the worker is root. */
  private launchArgv(
    req: PreparedRun,
    fs: { dir: string; env: Record<string, string> },
    channelDir?: string,
  ): string[] {
    const inner = ['bwrap', ...this.bwrapArgs(req, fs, channelDir)];
    // As root, drop to the sandbox uid on the host too: bwrap then runs unprivileged, and files
    // written to the workspace belong to the same uid as with the docker driver.
    return this.asRoot
      ? [
          'setpriv',
          `--reuid=${SANDBOX_UID}`,
          `--regid=${SANDBOX_GID}`,
          '--clear-groups',
          '--inh-caps=-all',
          '--',
          ...inner,
        ]
      : inner;
  }

  /** Starts a launcher for calls with these resources (pooled: the configured defaults). */
  private async spawnLauncher(resources: ResourceLimits): Promise<Launcher> {
    const id = `${process.pid}-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
    const cgroup = await CallCgroup.create(this.cgroups, id, resources).catch((err: unknown) => {
      this.log.warn({ err }, 'could not create a cgroup for the call; rlimits only');
      return undefined;
    });
    // bash's ulimit: -f in 1024-byte blocks, -v in KiB.
    const ulimits = [`-f ${(resources.fileSizeMb * MiB) / 1024}`, '-c 0', '-n 1024'];
    if (!cgroup) {
      // Weaker stand-ins: address space instead of memory; nproc counts every process of the uid.
      ulimits.push(`-v ${resources.memoryMb * 2 * 1024}`);
      if (this.asRoot) ulimits.push(`-u ${resources.pids * 4}`);
    }
    // --norc: bash sources ~/.bashrc when its stdin is a socket, as Node's pipes are.
    const argv = [
      '--norc',
      '--noprofile',
      '-c',
      launcherScript(ulimits),
      'launcher',
      ...(cgroup?.procsFiles ?? []),
      '--',
    ];
    const child = spawn('/bin/bash', argv, {
      stdio: ['pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
      detached: true,
      env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' },
    });
    let status = '';
    (child.stdio[3] as Readable).on('data', (b: Buffer) => (status += b.toString('utf8')));
    const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>(
      (resolve) => {
        child.once('error', () => resolve({ code: 127, signal: null }));
        // 'close': the process exited and its stdio is drained.
        child.once('close', (code, signal) => resolve({ code, signal }));
      },
    );
    child.stdin.on('error', () => undefined);
    // Small enough for the pipe's buffer; bwrap reads it to the end when the call starts.
    const filterFd = child.stdio[SECCOMP_FD] as Writable;
    filterFd.on('error', () => undefined);
    filterFd.end(this.seccomp ?? Buffer.alloc(0));
    return { child, cgroup, status: () => status, closed, createdAt: Date.now() };
  }

  private takeLauncher(): Launcher | undefined {
    const launcher = this.launchers.shift();
    this.refill();
    if (launcher) setRef(launcher, true);
    return launcher;
  }

  private refill(): void {
    const size = this.config.pool.size;
    while (!this.closed && this.launchers.length + this.filling < size) {
      this.filling++;
      this.spawnLauncher(this.defaultResources())
        .then((l) => {
          this.filling--;
          if (this.closed) return void this.discard(l);
          // An idle launcher must not keep the worker's event loop alive.
          setRef(l, false);
          this.launchers.push(l);
          void l.closed.then(() => {
            // Died while waiting (should not happen): drop it.
            const i = this.launchers.indexOf(l);
            if (i >= 0) this.launchers.splice(i, 1);
          });
        })
        .catch((err: unknown) => {
          this.filling--;
          this.log.warn({ err }, 'could not start a bwrap launcher');
        });
    }
  }

  private discard(l: Launcher): void {
    try {
      if (l.child.pid) process.kill(-l.child.pid, 'SIGKILL');
    } catch {
      // gone
    }
    if (l.cgroup) void l.cgroup.killAll().then(() => l.cgroup!.destroy());
  }

  private defaultResources(): ResourceLimits {
    const { memoryMb, cpus, pids, fileSizeMb, tmpfsMb } = this.config.limits;
    return { memoryMb, cpus, pids, fileSizeMb, tmpfsMb };
  }

  private async execute(
    req: PreparedRun,
    fs: { dir: string; env: Record<string, string> },
  ): Promise<RunResult> {
    const t0 = performance.now();
    const channelDir = req.channel
      ? await makeChannelDir(this.config.stateDir, this.owner)
      : undefined;
    let channel: ChannelListener | undefined;
    try {
      if (channelDir && req.channel) channel = await ChannelListener.open(channelDir, req.channel);
      return await this.executeIn(req, fs, channelDir, t0);
    } finally {
      await channel?.close();
      if (channelDir) await removeChannelDir(channelDir);
    }
  }

  private async executeIn(
    req: PreparedRun,
    fs: { dir: string; env: Record<string, string> },
    channelDir: string | undefined,
    t0: number,
  ): Promise<RunResult> {
    const pooled = req.defaultResources ? this.takeLauncher() : undefined;
    const launcher = pooled ?? (await this.spawnLauncher(req.resources));
    const { child, cgroup } = launcher;
    const argv = this.launchArgv(req, fs, channelDir);
    const killGroup = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // group already gone
      }
      void cgroup?.killAll();
    };
    this.children.add(killGroup);
    const watch = new RunWatchdog(req, killGroup, t0);
    child.stdout.on('data', watch.onStdout);
    child.stderr.on('data', watch.onStderr);
    child.stdin.end(encodeEnvelope(argv, req.stdin));
    this.options.hooks?.onStart?.({
      image: req.key,
      driver: 'bwrap',
      durationMs: performance.now() - t0,
      pooled: false,
    });

    try {
      const { code, signal } = await launcher.closed;
      const status = launcher.status();
      // Anything the call left behind (it cannot outlive its pid namespace, but be sure).
      await cgroup?.killAll();
      const oomKilled =
        !watch.killedByLimit && !watch.aborted && ((await cgroup?.oomKilled()) ?? false);
      watch.throwIfAborted();
      // bwrap writes {"exit-code"} only when the program ran and ended; a setup failure has none.
      const reported = /"exit-code"\s*:\s*(\d+)/.exec(status);
      if (!reported && !watch.killedByLimit && !oomKilled) {
        throw new SandboxError(
          'start_failed',
          `sandbox failed to start: ${watch.stderr.text().trim().slice(0, 500)}`,
        );
      }
      let exitCode = reported ? Number(reported[1]) : (code ?? 128 + signalNumber(signal));
      if (oomKilled && !reported) exitCode = 137;
      return watch.result(
        'bwrap',
        { exitCode, oomKilled, warm: pooled !== undefined },
        this.options.hooks,
      );
    } finally {
      watch.dispose();
      this.children.delete(killGroup);
      if (cgroup) void cgroup.killAll().then(() => cgroup.destroy());
    }
  }

  /**
   * Kills what dead workers' sandboxes left running on this host and removes their cgroups
   * (cgroup.ts reapDeadWorkers) and their code-mode channel directories; at start and every
   * reaper.intervalMs. Returns the cgroups removed.
   */
  async reap(): Promise<number> {
    // A worker is gone when isOwnerAlive (the workers' Redis heartbeats) says so, or, without
    // it, when its default id names this host and a pid no process has.
    const isOwnerAlive = this.options.isOwnerAlive;
    const channels = await reapChannelDirs(this.config.stateDir, this.owner, async (owner) =>
      isOwnerAlive ? !(await isOwnerAlive(owner)) : defaultOwnerGone(owner),
    );
    if (channels > 0)
      this.log.info({ owners: channels }, 'removed dead workers’ channel directories');
    const removed = await reapDeadWorkers(this.cgroups);
    if (removed > 0) this.log.info({ removed }, 'reaped sandboxes of dead workers');
    this.reapedCount += removed;
    return removed;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.reaper);
    await Promise.all([...this.processes].map((p) => p.kill()));
    for (const kill of this.children) kill();
    for (const l of this.launchers.splice(0)) this.discard(l);
  }
}

/** "bubblewrap 0.8.0" → [0, 8, 0]; undefined when it cannot be told. */
async function bwrapVersion(): Promise<number[] | undefined> {
  try {
    const { stdout } = await promisify(execFile)('bwrap', ['--version'], { timeout: 5000 });
    const m = /(\d+)\.(\d+)(?:\.(\d+))?/.exec(stdout);
    return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : undefined;
  } catch {
    return undefined;
  }
}

function compareVersions(a: number[], b: number[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** The image's ENV, written into the rootfs by the build script (a Docker image keeps it outside). */
async function readImageEnv(rootfs: string): Promise<Record<string, string>> {
  const text = await readFile(path.join(rootfs, 'etc/toolgate-sandbox.env'), 'utf8').catch(
    () => '',
  );
  const env: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) env[line.slice(0, i)] = line.slice(i + 1);
  }
  delete env.DEBIAN_FRONTEND;
  return env;
}

/**
 * The program's pid on the host: the child of bwrap's init (the pid bwrap reported), found in
 * the sandbox's cgroup or, without one, in /proc. A signal goes to it alone, as a terminal's
 * Ctrl-C reaches a program and not bwrap, whose init would die of it and take the sandbox along.
 * Just after the start the init may not have forked it yet: look again for up to a second.
 */
async function programPid(
  init: number,
  cgroup: CallCgroup | undefined,
): Promise<number | undefined> {
  for (let i = 0; i < 100; i++) {
    const candidates = cgroup
      ? await cgroup.pids()
      : (await readdir('/proc').catch(() => [])).filter((n) => /^\d+$/.test(n)).map(Number);
    for (const pid of candidates) {
      if (pid !== init && (await parentPid(pid)) === init) return pid;
    }
    if (!(await parentPid(init))) return undefined;
    await sleep(10);
  }
  return undefined;
}

/** From /proc/<pid>/stat: the fourth field, after the command name in parentheses. */
async function parentPid(pid: number): Promise<number | undefined> {
  const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (!text) return undefined;
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const ppid = Number(fields[1]);
  return Number.isInteger(ppid) ? ppid : undefined;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function signalNumber(signal: NodeJS.Signals | null): number {
  return (signal && constants.signals[signal]) || 9;
}

function setRef(l: Launcher, ref: boolean): void {
  const handles = [l.child, ...l.child.stdio] as unknown as ({
    ref?: () => void;
    unref?: () => void;
  } | null)[];
  for (const h of handles) {
    if (ref) h?.ref?.();
    else h?.unref?.();
  }
}
