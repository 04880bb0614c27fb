/**
 * bubblewrap driver, for hosts without a Docker engine: the same image rootfs (exported by
 * scripts/sandbox/build-images.sh) mounted read-only, every namespace unshared (no network),
 * a per-call cgroup for memory/pids/CPU (rlimits when cgroups are out of reach), the sandbox
 * uid, and a clean environment. bwrap starts in ~70 ms, so there is no pool.
 */
import { spawn, execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { access, readFile, stat, constants as fsConstants } from 'node:fs/promises';
import { constants } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { SandboxConfig } from './config.js';
import { CallCgroup, detectCgroups, type CgroupMode } from './cgroup.js';
import { SandboxError } from './errors.js';
import { CappedOutput } from './output.js';
import { prepareRun, silentLogger, type PreparedRun } from './run-request.js';
import type { DriverOptions, RunRequest, RunResult, SandboxDriver, SandboxLogger, SandboxStats } from './types.js';
import { SANDBOX_GID, SANDBOX_UID, WORKSPACE_MOUNT } from './workspaces.js';

const MiB = 1024 * 1024;
const BASE_ENV: Record<string, string> = {
  PATH: '/usr/local/bin:/usr/bin:/bin',
  HOME: '/tmp',
  LANG: 'C.UTF-8',
  TMPDIR: '/tmp',
};

/**
 * The one shell between the worker and bwrap: joins the cgroups named before "--", sets the
 * rlimits (dash builtins, no extra exec), then execs the rest — so the call is limited from its
 * first instruction.
 */
function wrapperScript(ulimits: string[]): string {
  const limits = ulimits.map((u) => `ulimit ${u} || exit 126; `).join('');
  return `for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 126; shift; done; shift; ${limits}exec "$@"`;
}

export class BwrapDriver implements SandboxDriver {
  readonly name = 'bwrap' as const;
  private readonly log: SandboxLogger;
  private started: Promise<void> | undefined;
  private cgroups: CgroupMode = 'none';
  private readonly rootfs = new Map<string, { dir: string; env: Record<string, string> }>();
  private readonly missing = new Set<string>();
  private readonly children = new Set<() => void>();
  private running = 0;
  private closed = false;
  private asRoot = process.getuid?.() === 0;

  constructor(
    private readonly config: SandboxConfig,
    private readonly options: DriverOptions = {},
  ) {
    this.log = options.logger ?? silentLogger;
  }

  /** Whether bwrap is installed and can create its namespaces here. */
  static async available(): Promise<boolean> {
    try {
      await promisify(execFile)('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { timeout: 5000 });
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
      throw new SandboxError('driver_unavailable', 'bubblewrap (bwrap) is not installed or cannot create namespaces here');
    }
    this.cgroups = await detectCgroups();
    if (this.cgroups === 'none') {
      this.log.warn({}, 'no writable cgroups: bwrap sandboxes are limited by rlimits only (no CPU limit, memory as address space)');
    }
    for (const [key, image] of Object.entries(this.config.images)) {
      const dir = path.resolve(image.rootfs);
      try {
        await access(path.join(dir, 'usr/bin'), fsConstants.R_OK);
        this.rootfs.set(key, { dir, env: await readImageEnv(dir) });
      } catch {
        this.missing.add(key);
        this.log.warn({ key, rootfs: dir }, 'sandbox rootfs missing; run scripts/sandbox/build-images.sh');
      }
    }
  }

  async warmUp(): Promise<void> {
    await this.start();
  }

  stats(): SandboxStats {
    const warm: Record<string, number> = {};
    for (const key of Object.keys(this.config.images)) warm[key] = 0;
    return { driver: 'bwrap', warm, running: this.running, reaped: 0 };
  }

  async run(request: RunRequest): Promise<RunResult> {
    if (this.closed) throw new SandboxError('closed', 'sandbox driver is closed');
    const req = prepareRun(this.config, request);
    await this.start();
    const fs = this.rootfs.get(req.key);
    if (!fs) {
      throw new SandboxError('driver_unavailable', `sandbox rootfs for "${req.key}" is not built; run scripts/sandbox/build-images.sh`);
    }
    if (req.network) throw new SandboxError('invalid_request', 'the bwrap driver gives sandboxes no network');
    if (req.workspace !== undefined) {
      const st = await stat(req.workspace).catch(() => undefined);
      if (!st?.isDirectory()) throw new SandboxError('invalid_request', `workspace ${req.workspace} is not a directory`);
    }
    req.signal?.throwIfAborted?.();
    this.running++;
    try {
      return await this.execute(req, fs);
    } finally {
      this.running--;
    }
  }

  private bwrapArgs(req: PreparedRun, fs: { dir: string; env: Record<string, string> }): string[] {
    const env = { ...fs.env, ...BASE_ENV };
    const args = [
      '--unshare-all',
      '--die-with-parent',
      '--new-session',
      '--ro-bind', fs.dir, '/',
      '--proc', '/proc',
      '--dev', '/dev',
      '--size', String(req.resources.tmpfsMb * MiB), '--tmpfs', '/tmp',
      '--hostname', 'sandbox',
      '--clearenv',
      ...Object.entries(env).flatMap(([k, v]) => ['--setenv', k, v]),
      '--uid', String(SANDBOX_UID),
      '--gid', String(SANDBOX_GID),
      '--cap-drop', 'ALL',
      // {"child-pid"} once the sandbox is up, {"exit-code"} at the end: tells start failures apart.
      '--json-status-fd', '3',
    ];
    if (req.workspace !== undefined) args.push('--bind', req.workspace, WORKSPACE_MOUNT, '--chdir', WORKSPACE_MOUNT);
    else args.push('--chdir', '/tmp');
    args.push('--', ...req.argv);
    return args;
  }

  private async execute(req: PreparedRun, fs: { dir: string; env: Record<string, string> }): Promise<RunResult> {
    const t0 = performance.now();
    const id = `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
    const cgroup = await CallCgroup.create(this.cgroups, id, req.resources).catch((err: unknown) => {
      this.log.warn({ err }, 'could not create a cgroup for the call; rlimits only');
      return undefined;
    });
    // dash's ulimit: -f in 512-byte blocks, -v in KiB.
    const ulimits = [`-f ${(req.resources.fileSizeMb * MiB) / 512}`, '-c 0', '-n 1024'];
    if (!cgroup) {
      // Weaker stand-ins: address space instead of memory; nproc counts every process of the uid.
      ulimits.push(`-v ${req.resources.memoryMb * 2 * 1024}`);
      if (this.asRoot) ulimits.push(`-p ${req.resources.pids * 4}`);
    }
    const inner = ['bwrap', ...this.bwrapArgs(req, fs)];
    // As root, drop to the sandbox uid on the host too: bwrap then runs unprivileged, and files
    // written to the workspace belong to the same uid as with the docker driver.
    const dropped = this.asRoot
      ? ['setpriv', `--reuid=${SANDBOX_UID}`, `--regid=${SANDBOX_GID}`, '--clear-groups', '--inh-caps=-all', '--', ...inner]
      : inner;
    const argv = ['/bin/sh', '-c', wrapperScript(ulimits), 'sh', ...(cgroup?.procsFiles ?? []), '--', ...dropped];

    const child = spawn(argv[0]!, argv.slice(1), {
      stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
      detached: true,
      env: { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' },
    });
    const stdout = new CappedOutput(req.outputBytes);
    const stderr = new CappedOutput(req.outputBytes);
    let timedOut = false;
    let outputLimited = false;
    let aborted = false;
    const kill = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // group already gone
      }
      void cgroup?.killAll();
    };
    this.children.add(kill);
    child.stdout.on('data', (b: Buffer) => {
      stdout.push(b);
      if (stdout.flooding && !outputLimited) {
        outputLimited = true;
        kill();
      }
    });
    child.stderr.on('data', (b: Buffer) => {
      stderr.push(b);
      if (stderr.flooding && !outputLimited) {
        outputLimited = true;
        kill();
      }
    });
    let status = '';
    const statusPipe = child.stdio[3] as NodeJS.ReadableStream;
    statusPipe.on('data', (b: Buffer) => (status += b.toString('utf8')));
    child.stdin.on('error', () => undefined);
    child.stdin.end(req.stdin === undefined ? undefined : Buffer.from(req.stdin));
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, req.timeoutMs);
    const onAbort = () => {
      aborted = true;
      kill();
    };
    req.signal?.addEventListener('abort', onAbort, { once: true });
    this.options.hooks?.onStart?.({ image: req.key, driver: 'bwrap', durationMs: performance.now() - t0 });

    try {
      const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
        child.once('error', reject);
        // 'close': the process exited and its stdio is drained.
        child.once('close', (code, signal) => resolve({ code, signal }));
      });
      // Anything the call left behind (it cannot outlive its pid namespace, but be sure).
      await cgroup?.killAll();
      const oomKilled = !timedOut && !outputLimited && !aborted && ((await cgroup?.oomKilled()) ?? false);
      if (aborted) throw new SandboxError('aborted', 'the call was cancelled and its sandbox killed');
      // bwrap writes {"exit-code"} only when the program ran and ended; a setup failure has none.
      const reported = /"exit-code"\s*:\s*(\d+)/.exec(status);
      if (!reported && !timedOut && !outputLimited && !oomKilled) {
        throw new SandboxError('start_failed', `sandbox failed to start: ${stderr.text().trim().slice(0, 500)}`);
      }
      let exitCode = reported ? Number(reported[1]) : (code ?? 128 + signalNumber(signal));
      if (timedOut || outputLimited || (oomKilled && !reported)) exitCode = 137;
      const durationMs = Math.round(performance.now() - t0);
      const result: RunResult = {
        stdout: stdout.text(),
        stderr: stderr.text(),
        exitCode,
        timedOut,
        truncated: stdout.truncated || stderr.truncated,
        outputLimited,
        oomKilled,
        durationMs,
        driver: 'bwrap',
        warm: false,
      };
      this.options.hooks?.onRun?.({ image: req.key, driver: 'bwrap', warm: false, durationMs, result });
      return result;
    } finally {
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
      this.children.delete(kill);
      if (cgroup) void cgroup.killAll().then(() => cgroup.destroy());
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const kill of this.children) kill();
  }
}

/** The image's ENV, written into the rootfs by the build script (a Docker image keeps it outside). */
async function readImageEnv(rootfs: string): Promise<Record<string, string>> {
  const text = await readFile(path.join(rootfs, 'etc/toolgate-sandbox.env'), 'utf8').catch(() => '');
  const env: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const i = line.indexOf('=');
    if (i > 0) env[line.slice(0, i)] = line.slice(i + 1);
  }
  delete env.DEBIAN_FRONTEND;
  return env;
}

function signalNumber(signal: NodeJS.Signals | null): number {
  return (signal && constants.signals[signal]) || 9;
}
