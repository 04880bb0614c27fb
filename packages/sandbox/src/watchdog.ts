/**
 * What every driver does around one run, whatever the sandbox is: the output caps, live output,
 * the wall-clock timeout, cancellation, the kill of a program flooding its output, and the
 * result. A driver supplies how to kill its sandbox and how the program ended.
 */
import { StringDecoder } from 'node:string_decoder';
import { SandboxError } from './errors.js';
import { CappedOutput } from './output.js';
import type { PreparedRun } from './run-request.js';
import type { DriverName, OutputStream, RunPhases, RunResult, SandboxHooks } from './types.js';

export class RunWatchdog {
  readonly stdout: CappedOutput;
  readonly stderr: CappedOutput;
  timedOut = false;
  outputLimited = false;
  aborted = false;
  private killed = false;
  /** Set once the result is out: no live output after it. */
  private settled = false;
  /** One per stream, so a character split across chunks reaches onOutput whole. */
  private readonly decoders = {
    stdout: new StringDecoder('utf8'),
    stderr: new StringDecoder('utf8'),
  };
  private readonly timer: NodeJS.Timeout;
  private readonly onAbort = () => {
    this.aborted = true;
    this.kill();
  };

  constructor(
    private readonly req: PreparedRun,
    /** Kills every process of the sandbox (`cancelled`: for an abort); called at most once. */
    private readonly killSandbox: (cancelled: boolean) => void,
    private readonly startedAt = performance.now(),
  ) {
    this.stdout = new CappedOutput(req.outputBytes);
    this.stderr = new CappedOutput(req.outputBytes);
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.kill();
    }, req.timeoutMs);
    // Cancelled while the sandbox was being made (a cold container, a launcher): 'abort' has
    // fired already and would never reach the listener.
    if (req.signal?.aborted) this.onAbort();
    else req.signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  kill(): void {
    if (this.killed) return;
    this.killed = true;
    this.killSandbox(this.aborted);
  }

  /** Feeds the program's stdout; writing far past the cap kills the sandbox. */
  readonly onStdout = (chunk: Buffer): void => this.push('stdout', this.stdout, chunk);
  readonly onStderr = (chunk: Buffer): void => this.push('stderr', this.stderr, chunk);

  /** The program did not choose its own end: the timeout or the flood kill did. */
  get killedByLimit(): boolean {
    return this.timedOut || this.outputLimited;
  }

  /** A cancelled call is an error of the call, not a result the model reads. */
  throwIfAborted(): void {
    if (this.aborted)
      throw new SandboxError('aborted', 'the call was cancelled and its sandbox killed');
  }

  /** The result of a run that ended; reports it to the hooks. */
  result(
    driver: DriverName,
    ended: { exitCode: number; oomKilled: boolean; warm: boolean },
    hooks: SandboxHooks | undefined,
    phases?: RunPhases,
  ): RunResult {
    // A character cut at the end (or at the cap) goes out as U+FFFD, as text() decodes it.
    this.emit('stdout', this.decoders.stdout.end());
    this.emit('stderr', this.decoders.stderr.end());
    this.settled = true;
    const durationMs = Math.round(performance.now() - this.startedAt);
    const result: RunResult = {
      stdout: this.stdout.text(),
      stderr: this.stderr.text(),
      // As a shell reports a SIGKILL: the timeout and the flood kill are one.
      exitCode: this.killedByLimit ? 137 : ended.exitCode,
      timedOut: this.timedOut,
      truncated: this.stdout.truncated || this.stderr.truncated,
      outputLimited: this.outputLimited,
      oomKilled: ended.oomKilled,
      durationMs,
      driver,
      warm: ended.warm,
    };
    hooks?.onRun?.({
      image: this.req.key,
      driver,
      warm: ended.warm,
      durationMs,
      result,
      ...(phases ? { phases } : {}),
    });
    return result;
  }

  /** Stops the timer and the cancellation listener; call once the run is over. */
  dispose(): void {
    this.settled = true;
    clearTimeout(this.timer);
    this.req.signal?.removeEventListener('abort', this.onAbort);
  }

  private push(stream: OutputStream, out: CappedOutput, chunk: Buffer): void {
    if (this.settled) return;
    const kept = out.push(chunk);
    if (kept.length > 0 && this.req.onOutput) this.emit(stream, this.decoders[stream].write(kept));
    if (out.flooding && !this.outputLimited) {
      this.outputLimited = true;
      this.kill();
    }
  }

  /** Hands a piece to the caller's onOutput; its failures are the caller's, never the run's. */
  private emit(stream: OutputStream, text: string): void {
    if (this.settled || this.aborted || text.length === 0 || !this.req.onOutput) return;
    try {
      // An async listener's rejection is as much the caller's as a throw.
      const returned = this.req.onOutput(stream, text) as unknown;
      if (returned instanceof Promise) returned.catch(() => undefined);
    } catch {
      // ignored: a broken listener must not break the run
    }
  }
}
