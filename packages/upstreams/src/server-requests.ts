/**
 * The requests an upstream sends toolgate on its session (roots/list, sampling/createMessage,
 * elicitation/create, ping, anything with an `id` and a `method`), answered within bounds the
 * upstream cannot lift: toolgate's client declares no capability, so each is answered "method
 * not found" (a ping with its empty result), at most `serverRequests.perCall` during one call
 * and at most `serverRequests.perSession` replies outstanding at once, each reply given
 * REPLY_SEND_MS. Past a bound a request is left unanswered: every answer is a POST, the very
 * work a flood asks for, and a refusal would be one too.
 */
import type { UpstreamConfig } from '@toolgate/config';
import type { ServerMessage } from './http-call.js';

/** Sockets per upstream origin for the replies; further replies wait their turn for one. */
export const REPLY_CONNECTIONS = 2;
/** How long one reply may take to send, its wait for a socket included; then it is dropped. */
export const REPLY_SEND_MS = 5000;
/** Requests left unanswered are logged at most this often, counted since the last line. */
const REFUSAL_LOG_MS = 10_000;
/** JSON-RPC "method not found": toolgate's client serves no requests from a server. */
const METHOD_NOT_FOUND = -32601;

export interface ServerRequestLogger {
  warn(obj: object, msg?: string): void;
}

/** Sends one reply on the session; settles (never rejects) once sent, failed or aborted. */
export type ReplySender = (message: Record<string, unknown>, signal: AbortSignal) => Promise<void>;

/** One call's share of the session's answers. */
export interface CallRequests {
  answered: number;
  /** Aborted when the call ends: its replies still pending are dropped with it. */
  readonly ended: AbortController;
}

/** A server request: a message with both `method` and `id`. */
export function isServerRequest(
  message: ServerMessage,
): message is ServerMessage & { id: string | number } {
  return message.id !== undefined && message.id !== null;
}

export class ServerRequests {
  /** Requests left unanswered so far (a bound was reached). */
  refused = 0;
  private outstanding = 0;
  private unlogged = 0;
  private logTimer: NodeJS.Timeout | undefined;
  private readonly closed = new AbortController();

  constructor(
    private readonly upstream: Pick<UpstreamConfig, 'id' | 'serverRequests'>,
    private readonly log?: ServerRequestLogger,
  ) {}

  /** Replies sent and not yet settled. */
  get pending(): number {
    return this.outstanding;
  }

  beginCall(): CallRequests {
    return { answered: 0, ended: new AbortController() };
  }

  /** The call has its answer, or failed: its pending replies are dropped. */
  endCall(call: CallRequests): void {
    call.ended.abort();
  }

  /**
   * Answers `request` through `send` (the session it came on) when within bounds; whether it
   * did. `call`: the call whose stream carried it; none for the session's own streams.
   */
  answer(
    request: ServerMessage & { id: string | number },
    send: ReplySender,
    call?: CallRequests,
  ): boolean {
    const { perCall, perSession } = this.upstream.serverRequests;
    if (
      this.closed.signal.aborted ||
      this.outstanding >= perSession ||
      (call !== undefined && (call.answered >= perCall || call.ended.signal.aborted))
    ) {
      this.refuse();
      return false;
    }
    if (call) call.answered++;
    this.outstanding++;
    const reply =
      request.method === 'ping'
        ? { id: request.id, result: {} }
        : {
            id: request.id,
            error: { code: METHOD_NOT_FOUND, message: `toolgate does not serve ${request.method}` },
          };
    const signal = AbortSignal.any([
      this.closed.signal,
      AbortSignal.timeout(REPLY_SEND_MS),
      ...(call ? [call.ended.signal] : []),
    ]);
    void send(reply, signal)
      .catch(() => undefined)
      .finally(() => this.outstanding--);
    return true;
  }

  /** Drops every pending reply; requests from now on are left unanswered. */
  close(): void {
    this.closed.abort();
    clearTimeout(this.logTimer);
    this.logTimer = undefined;
  }

  private refuse(): void {
    this.refused++;
    this.unlogged++;
    if (this.logTimer === undefined) this.logRefused();
  }

  /** One line now, then at most one per REFUSAL_LOG_MS while refusals go on. */
  private logRefused(): void {
    if (this.unlogged === 0 || this.closed.signal.aborted) {
      this.logTimer = undefined;
      return;
    }
    this.log?.warn(
      {
        upstream: this.upstream.id,
        unanswered: this.unlogged,
        unansweredTotal: this.refused,
        ...this.upstream.serverRequests,
      },
      'requests from the upstream left unanswered past serverRequests bounds',
    );
    this.unlogged = 0;
    this.logTimer = setTimeout(() => this.logRefused(), REFUSAL_LOG_MS);
    this.logTimer.unref();
  }
}
