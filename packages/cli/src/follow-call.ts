/**
 * Following one call from the terminal for `toolgate call`: its event stream
 * (GET /v1/calls/{id}/events, through remote/sse.ts, which resumes it with Last-Event-ID) as live
 * output and a progress line; Ctrl-C cancels, a second one leaves the call running.
 */
import { ExitError, colours, type CliIo } from './command.js';
import { sse, type Gateway, type SseEvent } from './remote/index.js';

/** A finished call as the API shows it (execute's answer, the events' `outcome`). */
export interface CallAnswer {
  id: string;
  tool: string;
  status: string;
  result?: unknown;
  error?: { code?: string; message?: string; details?: unknown };
  durationMs?: number;
  cached?: boolean;
  resultTruncated?: boolean;
}

/** What the event stream carried of each output stream. */
export interface Streamed {
  stdout: string;
  stderr: string;
}

/** The exit codes of `toolgate call` (docs/cli.md). */
export const EXIT = {
  ok: 0,
  toolError: 1,
  usage: 2,
  refused: 3,
  cancelled: 4,
  /** A second Ctrl-C: the call was left running (128 + SIGINT, the shell's "interrupted"). */
  interrupted: 130,
} as const;

/** Error codes that mean a policy or a person said no. */
const REFUSED = new Set([
  'policy_denied',
  'forbidden',
  'rejected',
  'approval_denied',
  'approval_required',
  'tool_quarantined',
  'insufficient_scope',
]);

/** The exit code for a finished call. */
export function exitCodeOf(answer: CallAnswer): number {
  if (answer.status === 'ok') return EXIT.ok;
  if (answer.status === 'cancelled' || answer.status === 'expired') return EXIT.cancelled;
  if (answer.status === 'rejected') return EXIT.refused;
  const code = answer.error?.code ?? '';
  if (code === 'timeout' || code === 'cancelled' || code === 'expired') return EXIT.cancelled;
  if (REFUSED.has(code)) return EXIT.refused;
  return EXIT.toolError;
}

/** The exit code for an API error answer to the call's request. */
export function exitCodeOfApiError(status: number, body: unknown): number {
  const code = (body as { error?: { code?: string } } | undefined)?.error?.code ?? '';
  if (status === 403) return EXIT.refused;
  if (status === 400 || status === 413) return EXIT.usage;
  return REFUSED.has(code) ? EXIT.refused : EXIT.toolError;
}

export interface FollowOptions {
  gw: Gateway;
  id: string;
  /** The call's status when it was accepted (`pending_approval` is said at once). */
  status?: string;
  /** Print output and progress as they come (a terminal); else only wait for the outcome. */
  live: boolean;
  /** Whether stderr is a terminal: the progress line is drawn only there. */
  stderrIsTTY: boolean;
}

/** Between the first Ctrl-C and the cancel request: time for a second one that means "leave it". */
export const CANCEL_GRACE_MS = 1000;

/**
 * Follows the call to its outcome. Returns the outcome, or a number: the exit code when the
 * command stopped without one (a second Ctrl-C, a stream the gateway refused).
 */
export async function followCall(
  io: CliIo,
  o: FollowOptions,
): Promise<{ answer: CallAnswer; streamed: Streamed } | number> {
  const c = colours({ isTTY: o.stderrIsTTY, env: io.env });
  const stop = new AbortController();
  const screen = new LiveScreen(io, o.live && o.stderrIsTTY);
  let outcome: CallAnswer | undefined;
  let interrupts = 0;
  let parked = false;

  let cancelTimer: NodeJS.Timeout | undefined;
  let cancelSent = false;
  const onInterrupt = () => {
    interrupts++;
    screen.clear();
    if (interrupts === 1) {
      io.err(
        `${c.yellow(`toolgate: cancelling call ${o.id}… (Ctrl-C again within ${CANCEL_GRACE_MS / 1000} s leaves it running)`)}\n`,
      );
      // A moment's grace, so that a quick second Ctrl-C can still leave the call running.
      cancelTimer = setTimeout(() => {
        cancelSent = true;
        void cancel(o).then((answer) => {
          // 200: the call is cancelled (the stream brings the same outcome; whichever comes first).
          if (answer && !outcome) {
            outcome = answer;
            stop.abort();
          }
        });
      }, CANCEL_GRACE_MS);
      return;
    }
    clearTimeout(cancelTimer);
    stop.abort();
  };
  process.on('SIGINT', onInterrupt);

  const status = (now: unknown) => {
    if (now === 'pending_approval' && !parked) {
      parked = true;
      screen.clear();
      io.err(
        `${c.yellow(`toolgate: call ${o.id} waits for an admin's approval (Ctrl-C cancels it)`)}\n`,
      );
    } else if (parked && now !== 'pending_approval') {
      parked = false;
      io.err(`toolgate: call ${o.id} approved, ${String(now)}\n`);
    }
  };
  status(o.status);
  const onEvent = (event: SseEvent) => {
    const data = parse(event.data);
    switch (event.event) {
      case 'status':
        status(data.status);
        break;
      case 'output':
        if (o.live) screen.output(data.stream === 'stderr', String(data.text ?? ''));
        break;
      case 'progress':
        if (o.live) screen.progress(data);
        break;
      case 'outcome': {
        const { at: _at, ...answer } = data;
        outcome = answer as unknown as CallAnswer;
        stop.abort();
        break;
      }
      default:
        // `error` (the gateway lost Redis mid-stream; it ends the stream and sse() reopens it).
        break;
    }
  };
  try {
    await sse(o.gw, `/v1/calls/${encodeURIComponent(o.id)}/events`, onEvent, stop.signal, {
      onReconnect: (why) => {
        screen.clear();
        io.err(`${c.dim(`toolgate: ${why.replace(/^toolgate: /, '')}; reconnecting`)}\n`);
      },
    });
  } catch (err) {
    if (!(err instanceof ExitError)) throw err;
    screen.clear();
    if (err.message) io.err(`${err.message}\n`);
    return err.exitCode;
  } finally {
    clearTimeout(cancelTimer);
    process.off('SIGINT', onInterrupt);
    screen.clear();
  }
  if (outcome) return { answer: outcome, streamed: screen.streamed };
  io.err(
    `toolgate: ${cancelSent ? `stopped waiting; the cancel of call ${o.id} was sent` : `left call ${o.id} running`}. Follow it: toolgate calls logs ${o.id} -f; stop it: toolgate calls cancel ${o.id}\n`,
  );
  io.out(`${o.id}\n`);
  return EXIT.interrupted;
}

/** POST /v1/calls/{id}/cancel; the cancelled call when the server confirms it at once. */
async function cancel(o: FollowOptions): Promise<CallAnswer | undefined> {
  try {
    const res = await fetch(`${o.gw.url}/v1/calls/${encodeURIComponent(o.id)}/cancel`, {
      method: 'POST',
      headers: o.gw.headers,
    });
    if (res.status !== 200) return undefined; // 202: not confirmed yet; 409: ended on its own
    const view = (await res.json()) as CallAnswer & Record<string, unknown>;
    return view.status === 'cancelled' ? pickAnswer(view) : undefined;
  } catch {
    return undefined; // the stream goes on; a second Ctrl-C still stops
  }
}

/** The execute-answer fields of a call view (GET /v1/calls/{id} adds client, arguments, …). */
function pickAnswer(view: Record<string, unknown>): CallAnswer {
  const keys = [
    'id',
    'tool',
    'status',
    'result',
    'error',
    'durationMs',
    'cached',
    'resultTruncated',
  ];
  return Object.fromEntries(
    keys.filter((k) => view[k] !== undefined).map((k) => [k, view[k]]),
  ) as unknown as CallAnswer;
}

function parse(data: string): Record<string, unknown> {
  try {
    const value = JSON.parse(data) as unknown;
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * Output as it comes, and the progress as one line on stderr that is redrawn in place: it is
 * erased before output is written and drawn again once the output ended its line.
 */
class LiveScreen {
  private line = '';
  private shown = false;
  private atLineStart = true;
  /** What the stream carried, per stream: the final result prints only what is missing. */
  readonly streamed: Streamed = { stdout: '', stderr: '' };

  constructor(
    private readonly io: CliIo,
    private readonly drawProgress: boolean,
  ) {}

  output(stderr: boolean, text: string): void {
    if (!text) return;
    this.clear();
    (stderr ? this.io.err : this.io.out)(text);
    this.streamed[stderr ? 'stderr' : 'stdout'] += text;
    this.atLineStart = text.endsWith('\n');
    this.draw();
  }

  progress(data: Record<string, unknown>): void {
    const n = Number(data.progress);
    const total = Number(data.total);
    const share =
      Number.isFinite(total) && total > 0
        ? `${n}/${total} ${Math.round((n / total) * 100)}%`
        : String(n);
    const message = typeof data.message === 'string' ? ` ${data.message}` : '';
    this.line = `[${share}]${message}`.replace(/[\r\n]+/g, ' ');
    this.clear();
    this.draw();
  }

  clear(): void {
    if (!this.shown) return;
    this.io.err('\r\x1b[K');
    this.shown = false;
  }

  private draw(): void {
    if (!this.drawProgress || !this.line || !this.atLineStart) return;
    const width = process.stderr.columns ? process.stderr.columns - 1 : 79;
    this.io.err(this.line.slice(0, width));
    this.shown = true;
  }
}
