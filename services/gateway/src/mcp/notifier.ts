/**
 * A running call's events as MCP notifications on the request's own response stream:
 * `notifications/progress` for requests that carry a progressToken (the tool's progress,
 * plus a keep-alive whenever no progress went out for a while, so clients whose timeout resets
 * on progress keep waiting), and `notifications/message` for its output at the client's
 * logging level.
 */
import type { CallEvent } from '@toolgate/calls';
import type { LoggingLevel, Notification, ProgressToken } from '@modelcontextprotocol/server';
import { passes } from './log-level.js';

/**
 * Longest time without a progress notification on a request with a progressToken. Only
 * progress counts: a client's timeout resets on progress (the SDK's resetTimeoutOnProgress),
 * never on log messages, so a call that prints a line a second still needs its keep-alives.
 */
export const KEEP_ALIVE_MS = 2000;

/** MCP progress must grow with every notification; repeats are nudged up by this much. */
const NUDGE = 0.001;

export interface NotifierOptions {
  send: (notification: Notification) => Promise<void>;
  tool: string;
  progressToken: ProgressToken | undefined;
  /** The client's level; undefined: no log messages at all (a 2026-07-28 request without one). */
  level: LoggingLevel | undefined;
  keepAliveMs?: number;
}

export class CallNotifier {
  /** Set once the call is queued: status messages name it, for `GET /v1/calls/{id}`. */
  callId: string | undefined;
  private chain: Promise<void> = Promise.resolve();
  private last = 0;
  private sentAny = false;
  private total: number | undefined;
  private status = 'queued';
  /** When the last progress notification was queued: what the keep-alive is timed on. */
  private lastProgressAt = Date.now();
  /** Output seen so far (characters), told in keep-alive messages. */
  private outputChars = 0;
  private readonly started = Date.now();
  private readonly timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: NotifierOptions) {
    if (o.progressToken !== undefined) {
      const every = o.keepAliveMs ?? KEEP_ALIVE_MS;
      this.timer = setInterval(
        () => {
          if (Date.now() - this.lastProgressAt >= every - 50) this.keepAlive();
        },
        Math.max(50, Math.floor(every / 4)),
      );
      this.timer.unref();
    }
  }

  /** For `CallRequest.onEvent`: synchronous, notifications go out in order. */
  readonly onEvent = (event: CallEvent): void => {
    switch (event.type) {
      case 'status':
        this.status = event.status;
        this.log('debug', `call ${this.callId ? `${this.callId} ` : ''}${event.status}`, 'status');
        return;
      case 'progress':
        if (event.total !== undefined) this.total = event.total;
        this.progress(event.progress, event.message);
        this.log(
          'debug',
          event.message ?? `progress ${event.progress}${event.total ? `/${event.total}` : ''}`,
          'progress',
        );
        return;
      case 'output': {
        this.outputChars += event.text.length;
        const text = event.text.replace(/\r?\n$/, '');
        if (text !== '')
          this.log(event.stream === 'stderr' ? 'warning' : 'info', text, event.stream);
        return;
      }
      case 'outcome':
        return;
    }
  };

  /** Stops the keep-alive and waits until every notification queued so far has been sent. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.chain;
  }

  private keepAlive(): void {
    const seconds = Math.round((Date.now() - this.started) / 1000);
    const output = this.outputChars > 0 ? `, ${this.outputChars} characters of output` : '';
    this.progress(this.sentAny ? this.last : 0, `${this.status} (${seconds} s${output})`);
  }

  private progress(value: number, message?: string): void {
    const { progressToken } = this.o;
    if (progressToken === undefined) return;
    const progress = this.sentAny && value <= this.last ? this.last + NUDGE : value;
    this.last = progress;
    this.sentAny = true;
    this.lastProgressAt = Date.now();
    this.enqueue({
      method: 'notifications/progress',
      params: {
        progressToken,
        progress,
        ...(this.total !== undefined ? { total: this.total } : {}),
        ...(message ? { message } : {}),
      },
    });
  }

  private log(level: LoggingLevel, data: string, stream: string): void {
    if (this.o.level === undefined || !passes(level, this.o.level)) return;
    this.enqueue({
      method: 'notifications/message',
      params: { level, logger: `${this.o.tool}/${stream}`, data },
    });
  }

  private enqueue(notification: Notification): void {
    // A client that went away only loses its notifications; the call's answer decides.
    this.chain = this.chain.then(() => this.o.send(notification)).catch(() => undefined);
  }
}
