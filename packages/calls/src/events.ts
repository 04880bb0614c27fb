import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { waitReady } from './redis.js';
import type { CallEvent, CallOutcome, CallStatus } from './types.js';

/** Entries a call's backlog keeps (the oldest go first); a reader joining late replays these. */
export const EVENT_BACKLOG = 512;
/** A call's backlog outlives the call by this long, for readers that come back to it. */
export const EVENT_BACKLOG_TTL_SECONDS = 3600;
/**
 * How often a writer sends its backlog's expiry again: once at its first write, then with a
 * write at least this long after (the backlog outlives the call's last write by
 * EVENT_BACKLOG_TTL_SECONDS minus at most this).
 */
const EXPIRE_EVERY_MS = 60_000;
/** Largest output chunk in one event; a flush that gathered more sends several. */
const MAX_CHUNK_CHARS = 8192;

export interface EventLimits {
  /** Output (stdout + stderr) forwarded per call; the rest is dropped with one notice. */
  maxOutputBytes: number;
  /** How often buffered output and the latest progress are written. */
  flushMs: number;
}

type NewEvent = CallEvent extends infer E
  ? E extends CallEvent
    ? Omit<E, 'seq' | 'at'>
    : never
  : never;

/**
 * A running call's events, from its worker: status changes at once, output and progress
 * written at most once per `flushMs` (so a tool printing a line per millisecond costs one
 * Redis round trip per flush, not per line), output capped at `maxOutputBytes`. Each write
 * appends to the call's capped backlog stream and publishes on its channel. Never throws: a
 * lost event is not worth failing a call for.
 */
export class CallEventWriter {
  private seq = 0;
  private readonly output = { stdout: '', stderr: '' };
  private progressed: Omit<Extract<CallEvent, { type: 'progress' }>, 'seq' | 'at'> | undefined;
  private outputBytes = 0;
  private dropped = false;
  private timer: NodeJS.Timeout | undefined;
  private flushedAt = -Infinity;
  private expiredAt = -Infinity;
  private writing: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly callId: string,
    private readonly limits: EventLimits,
    private readonly onError: (err: unknown) => void = () => undefined,
  ) {}

  status(status: CallStatus): void {
    this.write([{ type: 'status', status }]);
  }

  /** For `ToolContext.events`: buffered, capped. */
  readonly events = {
    output: (stream: 'stdout' | 'stderr', text: string): void => {
      if (this.closed || this.dropped || typeof text !== 'string' || text === '') return;
      const room = this.limits.maxOutputBytes - this.outputBytes;
      const bytes = Buffer.byteLength(text);
      if (bytes > room) {
        this.dropped = true;
        text = Buffer.from(text)
          .subarray(0, Math.max(0, room))
          .toString()
          .replace(/\uFFFD$/, '');
        text += `\n[toolgate: live output stopped at ${this.limits.maxOutputBytes} bytes; the result has the rest]\n`;
      }
      this.outputBytes += bytes;
      this.output[stream] += text;
      this.schedule();
    },
    progress: (progress: number, total?: number, message?: string): void => {
      if (this.closed || !Number.isFinite(progress)) return;
      // Only the latest counts: a tool reporting every step writes one event a flush.
      this.progressed = {
        type: 'progress',
        progress,
        ...(total !== undefined && Number.isFinite(total) ? { total } : {}),
        ...(message ? { message: String(message).slice(0, 1024) } : {}),
      };
      this.schedule();
    },
  };

  /**
   * Writes what is buffered and returns the outcome event, for the caller to publish in the
   * pipeline that ends the call (`publishOutcome`), after every earlier event.
   */
  async finishWrites(outcome: CallOutcome): Promise<OutcomeEvent> {
    this.flush();
    await this.writing;
    return this.finish(outcome);
  }

  /** Nothing was emitted: `finish` needs no wait (most fast calls). */
  get idle(): boolean {
    return this.seq === 0 && this.timer === undefined;
  }

  /** The outcome event, for a writer that is idle or whose writes have landed. */
  finish(outcome: CallOutcome): OutcomeEvent {
    this.closed = true;
    return outcomeEvent(outcome, ++this.seq);
  }

  /**
   * At most one write per `flushMs`: the first piece after a quiet spell goes out at once
   * (what arrives in the same turn of the event loop with it), later ones wait for the end of
   * the interval that write started.
   */
  private schedule(): void {
    if (this.timer) return;
    const wait = this.flushedAt + this.limits.flushMs - performance.now();
    this.timer = setTimeout(() => this.flush(), Math.max(0, wait));
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.flushedAt = performance.now();
    const events: NewEvent[] = [];
    for (const stream of ['stdout', 'stderr'] as const) {
      const text = this.output[stream];
      this.output[stream] = '';
      for (let i = 0; i < text.length; i += MAX_CHUNK_CHARS) {
        events.push({ type: 'output', stream, text: text.slice(i, i + MAX_CHUNK_CHARS) });
      }
    }
    if (this.progressed) events.push(this.progressed);
    this.progressed = undefined;
    if (events.length > 0) this.write(events);
  }

  private write(events: NewEvent[]): void {
    if (this.closed) return;
    const pipeline = this.redis.pipeline();
    const backlog = this.keys.events(this.callId);
    for (const event of events) {
      const text = JSON.stringify({ ...event, seq: ++this.seq, at: Date.now() });
      pipeline
        .xadd(backlog, 'MAXLEN', '~', EVENT_BACKLOG, '*', 'e', text)
        .publish(this.keys.eventsChannel(this.callId), text);
    }
    const now = performance.now();
    if (now - this.expiredAt >= EXPIRE_EVERY_MS) {
      this.expiredAt = now;
      pipeline.expire(backlog, EVENT_BACKLOG_TTL_SECONDS);
    }
    // In order: each write starts after the one before it has gone out.
    this.writing = this.writing.then(() => pipeline.exec().catch(this.onError));
  }
}

export type OutcomeEvent = Extract<CallEvent, { type: 'outcome' }>;

/**
 * The last event of a call that ended without a worker's events (cancelled in the queue,
 * rejected, expired): the first of its kind, so seq 1.
 */
export function outcomeEvent(outcome: CallOutcome, seq = 1): OutcomeEvent {
  return { type: 'outcome', outcome, seq, at: Date.now() };
}

/** Adds the publication of a call's last event to a pipeline that ends the call. */
export function publishOutcome(
  pipeline: ChainableCommander,
  keys: Keys,
  event: OutcomeEvent,
): void {
  pipeline.publish(keys.eventsChannel(event.outcome.id), JSON.stringify(event));
}

type Listener = (event: CallEvent) => void;

/**
 * The gateway's side: live events of the calls someone watches, on one subscriber
 * connection shared by every watcher (a channel per watched call, subscribed while watched),
 * and the backlog for readers that join late.
 */
export class CallEvents {
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly channelPrefix: string;

  constructor(
    private readonly redis: RedisClient,
    /** A subscriber connection (it may carry other channels; they are ignored). */
    private readonly subscriber: RedisClient,
    private readonly keys: Keys,
  ) {
    this.channelPrefix = keys.eventsChannel('');
    subscriber.on('message', (channel: string, message: string) => {
      if (!channel.startsWith(this.channelPrefix)) return;
      const set = this.listeners.get(channel.slice(this.channelPrefix.length));
      if (!set) return;
      let event: CallEvent;
      try {
        event = JSON.parse(message) as CallEvent;
      } catch {
        return;
      }
      for (const listener of [...set]) listener(event);
    });
  }

  /** Calls `listener` with the call's live events until the returned function is called. */
  async subscribe(id: string, listener: Listener): Promise<() => void> {
    let set = this.listeners.get(id);
    const first = !set;
    if (!set) this.listeners.set(id, (set = new Set()));
    set.add(listener);
    const unsubscribe = () => {
      const current = this.listeners.get(id);
      if (!current?.delete(listener) || current.size > 0) return;
      this.listeners.delete(id);
      this.subscriber.unsubscribe(this.keys.eventsChannel(id)).catch(() => undefined);
    };
    if (first) {
      try {
        // Not during the connection's ready check (see the worker's cancel subscriber).
        await waitReady(this.subscriber, 5000);
        await this.subscriber.subscribe(this.keys.eventsChannel(id));
      } catch (err) {
        unsubscribe();
        throw err;
      }
    }
    return unsubscribe;
  }

  /** The call's backlog, oldest first (at most EVENT_BACKLOG entries). */
  async backlog(id: string): Promise<CallEvent[]> {
    const entries = await this.redis.xrange(this.keys.events(id), '-', '+');
    const events: CallEvent[] = [];
    for (const [, fields] of entries) {
      const text = fields[1];
      if (text === undefined) continue;
      try {
        events.push(JSON.parse(text) as CallEvent);
      } catch {
        // not ours
      }
    }
    return events;
  }

  /** Calls watched on this gateway now (for metrics and tests). */
  get watched(): number {
    return this.listeners.size;
  }
}
