/**
 * One session on its worker: a long-lived sandbox (SandboxProcess) running a kernel
 * (kernels.ts), and its calls, run one at a time in the order they came.
 */
import type { Readable } from 'node:stream';
import { ToolError, type ToolContext } from '@toolgate/registry';
import type { SandboxProcess } from '@toolgate/sandbox';
import type { SessionTool } from '@toolgate/calls';
import type { Attachment, OmittedAttachment } from '@toolgate/tools';
import { FRAME_START, SHELL_INTERRUPT, encodeRequest } from './kernels.js';

export interface SessionRunResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  timedOut: boolean;
  truncated: boolean;
  attachments?: Attachment[];
  attachmentsOmitted?: OmittedAttachment[];
}

export interface SessionLimits {
  /** stdout and stderr of one call are each cut at this many bytes (sandbox.limits.outputBytes). */
  outputBytes: number;
  /** An interrupt that has not stopped a call after this long ends the session. */
  interruptGraceMs: number;
  /** The sandbox's memory limit, for the line the model reads after an OOM kill. */
  memoryMb: number;
  /** Rich outputs per call: how many, and how big each (bytes before base64). */
  attachments: { count: number; bytes: number };
}

const DEFAULT_TIMEOUT_S = 30;

/** Output of one stream of the kernel, split into the call's text and the kernel's frames. */
class FrameReader {
  private buffer = '';
  /** Inside a frame longer than maxFrame: dropped up to its newline. */
  private skipping = false;
  /** Characters of that frame dropped so far. */
  private skipped = 0;

  constructor(
    stream: Readable,
    private readonly marker: string,
    private readonly onText: (text: string) => void,
    private readonly onFrame: (json: string) => void,
    /** Longest frame kept (an image's base64 and its JSON); a longer one is dropped unread. */
    private readonly maxFrame: number,
    private readonly onOversize: (chars: number) => void,
  ) {
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => this.feed(chunk));
  }

  private feed(chunk: string): void {
    if (this.skipping) {
      const end = chunk.indexOf('\n');
      if (end === -1) {
        this.skipped += chunk.length;
        return;
      }
      this.onOversize(this.skipped + end);
      this.skipping = false;
      this.skipped = 0;
      chunk = chunk.slice(end + 1);
    }
    this.buffer += chunk;
    for (;;) {
      const at = this.buffer.indexOf(this.marker);
      if (at === -1) {
        // Keep what could be the start of a marker cut between two chunks.
        const keep = this.partialMarker();
        const text = this.buffer.slice(0, this.buffer.length - keep);
        if (text) this.onText(text);
        this.buffer = this.buffer.slice(this.buffer.length - keep);
        return;
      }
      const end = this.buffer.indexOf('\n', at);
      if (end === -1) {
        if (at > 0) this.onText(this.buffer.slice(0, at));
        this.buffer = this.buffer.slice(at);
        // Code in the session can write frames too: one without an end must not fill memory.
        if (this.buffer.length > this.maxFrame) {
          this.skipping = true;
          this.skipped = this.buffer.length;
          this.buffer = '';
        }
        return;
      }
      if (end - at > this.maxFrame) {
        if (at > 0) this.onText(this.buffer.slice(0, at));
        this.onOversize(end - at);
        this.buffer = this.buffer.slice(end + 1);
        continue;
      }
      if (at > 0) this.onText(this.buffer.slice(0, at));
      this.onFrame(this.buffer.slice(at + this.marker.length, end));
      this.buffer = this.buffer.slice(end + 1);
    }
  }

  private partialMarker(): number {
    const from = Math.max(0, this.buffer.length - this.marker.length + 1);
    const tail = this.buffer.lastIndexOf(FRAME_START, this.buffer.length - 1);
    if (tail < from) return 0;
    return this.marker.startsWith(this.buffer.slice(tail)) ? this.buffer.length - tail : 0;
  }
}

/** The call in progress: its output so far and how it ends. */
interface Current {
  stdout: string;
  stderr: string;
  truncated: boolean;
  exitCode: number | undefined;
  fenced: boolean;
  attachments: Attachment[];
  omitted: OmittedAttachment[];
  done: () => void;
  onOutput: ((stream: 'stdout' | 'stderr', text: string) => void) | undefined;
}

export class Session {
  /** Epoch ms of the last call's end (or the start): the idle clock. */
  lastUsedAt = Date.now();
  private chain: Promise<unknown> = Promise.resolve();
  private current: Current | undefined;
  private readyResolve: (() => void) | undefined;
  /** The kernel's first frame and fence (stdout and stderr) have both come. */
  private readyParts = 0;
  private readonly readyPromise: Promise<void>;
  private queued = 0;
  private over = false;
  /** What the kernel wrote to stderr before it was ready (said when it fails to start). */
  private startErr = '';

  constructor(
    readonly id: string,
    readonly tool: SessionTool,
    readonly clientId: string,
    private readonly process: SandboxProcess,
    /** Random per session: the kernel's frames carry it (kernels.ts). */
    token: string,
    private readonly limits: SessionLimits,
  ) {
    void process.exited.then(() => (this.over = true));
    const marker = FRAME_START + token;
    this.readyPromise = new Promise((resolve) => (this.readyResolve = resolve));
    // An image's frame: its base64 (4/3 of its bytes) and a little JSON around it.
    const maxFrame = Math.ceil(limits.attachments.bytes / 3) * 4 + 1024;
    new FrameReader(
      process.stdout,
      marker,
      (text) => this.output('stdout', text),
      (json) => this.frame(json),
      maxFrame,
      (chars) => this.omit('image/png', Math.floor((chars * 3) / 4), 'attachment_too_large'),
    );
    new FrameReader(
      process.stderr,
      marker,
      (text) => this.output('stderr', text),
      () => this.fence(),
      maxFrame,
      () => undefined,
    );
  }

  /** Resolves once the kernel has started (or rejects if the sandbox ended first). */
  async ready(): Promise<void> {
    const exit = this.process.exited.then((e) => {
      throw new ToolError(
        'session_lost',
        `the session's kernel ended while starting (exit ${e.exitCode})${this.startErr ? `: ${this.startErr.trim()}` : ''}`,
      );
    });
    await Promise.race([this.readyPromise, exit]);
  }

  get running(): boolean {
    return !this.over;
  }

  /** A call runs now or waits for one. */
  get busy(): boolean {
    return this.queued > 0;
  }

  get exited(): SandboxProcess['exited'] {
    return this.process.exited;
  }

  stats(): ReturnType<SandboxProcess['stats']> {
    return this.process.stats();
  }

  kill(): Promise<void> {
    return this.process.kill();
  }

  /**
   * Runs one call after the session's earlier ones. Its timeout (and a cancel: ctx.signal)
   * interrupts it (SIGINT); a call that does not stop within the grace ends the session.
   */
  run(
    code: string,
    timeoutSeconds: number | undefined,
    ctx: Pick<ToolContext, 'signal' | 'events'>,
  ): Promise<SessionRunResult> {
    this.queued++;
    const result = this.chain.then(() =>
      this.runNow(code, timeoutSeconds ?? DEFAULT_TIMEOUT_S, ctx),
    );
    this.chain = result
      .catch(() => undefined)
      .finally(() => {
        this.queued--;
        this.lastUsedAt = Date.now();
      });
    return result;
  }

  private async runNow(
    code: string,
    timeoutS: number,
    ctx: Pick<ToolContext, 'signal' | 'events'>,
  ): Promise<SessionRunResult> {
    if (this.over) throw this.lost('its sandbox had ended');
    // A call cancelled while it waited behind another never starts.
    if (ctx.signal.aborted) throw new ToolError('cancelled', 'the call was cancelled');
    let finished!: () => void;
    const completed = new Promise<void>((resolve) => (finished = resolve));
    const current: Current = {
      stdout: '',
      stderr: '',
      truncated: false,
      exitCode: undefined,
      fenced: false,
      attachments: [],
      omitted: [],
      done: finished,
      onOutput: ctx.events ? (stream, text) => ctx.events?.output(stream, text) : undefined,
    };
    this.current = current;
    let interrupted: 'timeout' | 'cancel' | undefined;
    let graceTimer: NodeJS.Timeout | undefined;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const overGrace = new Promise<'over'>((resolve) => {
      const interrupt = (why: 'timeout' | 'cancel') => {
        if (interrupted) return;
        interrupted = why;
        // Python: SIGINT is KeyboardInterrupt; bash would wait for its command first, so its
        // loop takes an interrupt line instead (kernels.ts).
        if (this.tool === 'run_shell') this.process.stdin.write(SHELL_INTERRUPT);
        else this.process.signal('SIGINT').catch(() => undefined);
        graceTimer = setTimeout(() => resolve('over'), this.limits.interruptGraceMs);
      };
      timer = setTimeout(() => interrupt('timeout'), timeoutS * 1000);
      onAbort = () => interrupt('cancel');
      ctx.signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      this.process.stdin.write(encodeRequest(this.tool, code));
      const ended = await Promise.race([
        completed.then(() => 'done' as const),
        overGrace,
        this.process.exited.then(() => 'exited' as const),
      ]);
      if (ended === 'over') {
        await this.process.kill();
        throw this.lost(
          `the call did not stop within ${this.limits.interruptGraceMs} ms of its interrupt, so the session was ended`,
        );
      }
      if (ended === 'exited') {
        const exit = await this.process.exited;
        throw this.lost(
          exit.oomKilled
            ? `its sandbox was killed: memory limit of ${this.limits.memoryMb} MiB exceeded`
            : `its kernel exited (status ${exit.exitCode})`,
        );
      }
      let stderr = current.stderr;
      if (interrupted === 'timeout') {
        stderr +=
          (stderr && !stderr.endsWith('\n') ? '\n' : '') +
          `[session] interrupted after ${timeoutS} s: wall-clock timeout; the session's state is kept\n`;
      }
      if (current.truncated) stderr += '[session] output truncated at the output limit\n';
      for (const o of current.omitted) {
        stderr +=
          o.code === 'too_many_attachments'
            ? `[session] a ${o.mimeType} output was not attached: ${o.code} (at most ${this.limits.attachments.count} per call)\n`
            : `[session] a ${o.mimeType} output of ${o.bytes} bytes was not attached: ${o.code} (at most ${this.limits.attachments.bytes} bytes)\n`;
      }
      return {
        stdout: current.stdout,
        stderr,
        exitCode: current.exitCode ?? 0,
        timedOut: interrupted === 'timeout',
        truncated: current.truncated,
        ...(current.attachments.length > 0 ? { attachments: current.attachments } : {}),
        ...(current.omitted.length > 0 ? { attachmentsOmitted: current.omitted } : {}),
      };
    } finally {
      clearTimeout(timer);
      clearTimeout(graceTimer);
      if (onAbort) ctx.signal.removeEventListener('abort', onAbort);
      if (this.current === current) this.current = undefined;
    }
  }

  private lost(why: string): ToolError {
    return new ToolError('session_lost', `session ${this.id} is gone: ${why}; start a new session`);
  }

  private output(stream: 'stdout' | 'stderr', text: string): void {
    const current = this.current;
    if (!current) {
      // Between calls (a background process's late output): dropped, but for the start's.
      if (this.readyParts < 2 && stream === 'stderr' && this.startErr.length < 2048)
        this.startErr += text;
      return;
    }
    current.onOutput?.(stream, text);
    const room = this.limits.outputBytes - Buffer.byteLength(current[stream]);
    if (room <= 0) {
      current.truncated = true;
      return;
    }
    if (Buffer.byteLength(text) > room) {
      current[stream] += Buffer.from(text)
        .subarray(0, room)
        .toString('utf8')
        .replace(/\uFFFD$/, '');
      current.truncated = true;
    } else {
      current[stream] += text;
    }
  }

  private frame(json: string): void {
    let frame: {
      t?: string;
      exitCode?: number;
      mime?: unknown;
      data?: unknown;
      omitted?: unknown;
      bytes?: unknown;
    };
    try {
      frame = JSON.parse(json) as typeof frame;
    } catch {
      return;
    }
    if (frame.t === 'display') {
      this.display(frame);
      return;
    }
    if (frame.t === 'ready') {
      if (++this.readyParts === 2) this.readyResolve?.();
      return;
    }
    const current = this.current;
    if (frame.t !== 'done' || !current) return;
    current.exitCode = typeof frame.exitCode === 'number' ? frame.exitCode : 0;
    if (current.fenced) current.done();
  }

  /** A rich output of the running call, checked again here: the kernel is not trusted. */
  private display(frame: { mime?: unknown; data?: unknown; omitted?: unknown; bytes?: unknown }) {
    const current = this.current;
    if (!current) return;
    const mimeType = frame.mime === 'image/png' ? 'image/png' : 'text/plain';
    if (frame.omitted === 'attachment_too_large' || frame.omitted === 'too_many_attachments') {
      this.omit(mimeType, typeof frame.bytes === 'number' ? frame.bytes : 0, frame.omitted);
      return;
    }
    if (typeof frame.data !== 'string') return;
    const attachment: Attachment =
      mimeType === 'image/png'
        ? {
            mimeType,
            encoding: 'base64',
            data: frame.data,
            bytes: Buffer.byteLength(frame.data, 'base64'),
          }
        : { mimeType, encoding: 'utf-8', data: frame.data, bytes: Buffer.byteLength(frame.data) };
    if (attachment.bytes > this.limits.attachments.bytes) {
      this.omit(mimeType, attachment.bytes, 'attachment_too_large');
    } else if (current.attachments.length >= this.limits.attachments.count) {
      this.omit(mimeType, attachment.bytes, 'too_many_attachments');
    } else {
      current.attachments.push(attachment);
    }
  }

  private omit(mimeType: string, bytes: number, code: OmittedAttachment['code']): void {
    // Bounded like the attachments: of a flood of refused outputs, the first `count` are listed.
    const current = this.current;
    if (!current || current.omitted.length >= this.limits.attachments.count) return;
    current.omitted.push({ mimeType, bytes, code });
  }

  private fence(): void {
    if (this.readyParts < 2) {
      // The ready frame's fence: the first call starts after it, never counts it as its own.
      if (++this.readyParts === 2) this.readyResolve?.();
      return;
    }
    const current = this.current;
    if (!current) return;
    current.fenced = true;
    if (current.exitCode !== undefined) current.done();
  }
}
