/**
 * What both drivers share for long-lived sandboxes (SandboxDriver.open): the request checks,
 * bounded output streams, and the handle whose kill and cleanup happen exactly once. A driver
 * supplies how to signal its program, how to tear its sandbox down and how the program ended.
 */
import { Readable } from 'node:stream';
import type { SandboxConfig } from './config.js';
import { SandboxError } from './errors.js';
import { prepareRun, type PreparedRun } from './run-request.js';
import type {
  DriverName,
  OpenRequest,
  ProcessExit,
  ProcessSignal,
  ProcessStats,
  SandboxProcess,
} from './types.js';

const KiB = 1024;
const MiB = 1024 * KiB;
export const DEFAULT_OUTPUT_BUFFER = MiB;
const MAX_OUTPUT_BUFFER = 64 * MiB;
const SIGNALS: ReadonlySet<string> = new Set<ProcessSignal>([
  'SIGINT',
  'SIGTERM',
  'SIGHUP',
  'SIGQUIT',
  'SIGUSR1',
  'SIGUSR2',
]);

export interface PreparedOpen extends PreparedRun {
  outputBufferBytes: number;
}

/** The same checks and limits as a run; a long-lived sandbox has no timeout of its own. */
export function prepareOpen(config: SandboxConfig, request: OpenRequest): PreparedOpen {
  const buffer = request.outputBufferBytes ?? DEFAULT_OUTPUT_BUFFER;
  if (!Number.isInteger(buffer) || buffer < KiB || buffer > MAX_OUTPUT_BUFFER) {
    throw new SandboxError(
      'invalid_request',
      `outputBufferBytes must be an integer from ${KiB} to ${MAX_OUTPUT_BUFFER}`,
    );
  }
  for (const arg of request.argv) {
    if (arg.includes('\0'))
      throw new SandboxError('invalid_request', 'arguments cannot contain NUL bytes');
  }
  const prepared = prepareRun(config, {
    image: request.image,
    argv: request.argv,
    workspace: request.workspace,
    network: request.network,
    limits: request.limits,
    signal: request.signal,
    callId: request.label,
    clientId: request.clientId,
  });
  return { ...prepared, outputBufferBytes: buffer };
}

export function checkSignal(name: string): asserts name is ProcessSignal {
  if (!SIGNALS.has(name)) {
    throw new SandboxError(
      'invalid_request',
      `signal must be one of ${[...SIGNALS].join(', ')} (kill() ends the sandbox)`,
    );
  }
}

/**
 * One output stream of a long-lived program. At most `limit` bytes wait for a reader that is
 * behind: past that push() says so and the driver stops reading the program's pipe, so the
 * program blocks on its next write instead of the worker's memory growing.
 */
export class BoundedOutput extends Readable {
  constructor(
    limit: number,
    /** The reader wants more: the driver may read the program's pipe again. */
    private readonly onDemand: () => void,
  ) {
    super({ highWaterMark: limit });
  }

  override _read(): void {
    this.onDemand();
  }

  /** Queues a chunk; false when the reader is behind by the limit (the driver then pauses). */
  feed(chunk: Buffer): boolean {
    if (this.readableEnded || this.destroyed) return true;
    return this.push(chunk);
  }

  /** No more output (the program ended); what is queued can still be read. */
  finish(): void {
    if (!this.readableEnded && !this.destroyed) this.push(null);
  }

  get behind(): boolean {
    return this.readableLength >= this.readableHighWaterMark;
  }
}

export interface ProcessBackend {
  /** Delivers the signal to the program (not to the sandbox's other processes). */
  signal(name: ProcessSignal): Promise<void>;
  /** Kills every process of the sandbox and removes it; called exactly once. */
  destroy(): Promise<void>;
  memoryBytes(): Promise<number | undefined>;
}

/**
 * A long-lived sandbox as its owner sees it. The driver calls ended() when it learns how the
 * program ended (whether by itself or by kill()); the sandbox is then destroyed, once.
 */
export class ProcessHandle implements SandboxProcess {
  readonly exited: Promise<ProcessExit>;
  private resolveExit: (exit: ProcessExit) => void = () => undefined;
  private destroying: Promise<void> | undefined;
  private killed = false;
  private over = false;
  private readonly onAbort = () => void this.kill();

  constructor(
    readonly driver: DriverName,
    readonly stdin: SandboxProcess['stdin'],
    readonly stdout: BoundedOutput,
    readonly stderr: BoundedOutput,
    private readonly backend: ProcessBackend,
    private readonly abortSignal: AbortSignal | undefined,
    private readonly onGone: () => void,
  ) {
    this.exited = new Promise((resolve) => (this.resolveExit = resolve));
    // Writes after the program is gone are the owner's to notice on exited, not a crash.
    stdin.on('error', () => undefined);
    if (abortSignal?.aborted) void this.kill();
    else abortSignal?.addEventListener('abort', this.onAbort, { once: true });
  }

  get running(): boolean {
    return !this.over;
  }

  async signal(name: ProcessSignal): Promise<void> {
    checkSignal(name);
    if (this.over || this.killed) return;
    await this.backend.signal(name);
  }

  /** Idempotent: every caller waits for the same teardown and the same exit. */
  async kill(): Promise<void> {
    this.killed = true;
    await this.destroy();
    await this.exited;
  }

  async stats(): Promise<ProcessStats> {
    if (this.over) return { memoryBytes: undefined };
    return { memoryBytes: await this.backend.memoryBytes().catch(() => undefined) };
  }

  /**
   * The driver learned how the program ended: tear the sandbox down (once), close the output
   * streams (what was queued stays readable), then settle `exited`.
   */
  async ended(exit: Omit<ProcessExit, 'killed'>): Promise<void> {
    if (this.over) return;
    this.over = true;
    this.abortSignal?.removeEventListener('abort', this.onAbort);
    await this.destroy();
    this.stdout.finish();
    this.stderr.finish();
    this.stdin.destroy();
    this.onGone();
    const killed = this.killed;
    this.resolveExit({
      exitCode: killed && !exit.oomKilled ? 137 : exit.exitCode,
      oomKilled: exit.oomKilled,
      killed,
    });
  }

  private destroy(): Promise<void> {
    this.destroying ??= this.backend.destroy().catch(() => undefined);
    return this.destroying;
  }
}
