/**
 * The gateway's side of the held-connection budget (ConnectionBudget in @toolgate/calls): ties
 * one HTTP request that keeps its connection open to one slot of its client's budget, from
 * before the handler's first await until the connection closes.
 */
import type { ConnectionBudget, HeldSlot, RedisClient } from '@toolgate/calls';
import type { Response } from 'express';
import type { Client } from './clients.js';
import { ApiError } from './errors.js';
import { guardRedis } from './pipeline.js';

/** When a client refused a slot may try again: held connections end at no predictable time. */
const RETRY_SECONDS = 5;

/** A request's hold on its connection. */
export interface Held {
  /** Aborted when the client goes away (or had gone before the handler ran) or the gateway stops. */
  readonly signal: AbortSignal;
  /** Ends the hold and gives the slot back. Also done on close; only the first call counts. */
  release(): void;
}

export class HeldConnections {
  constructor(
    private readonly budget: ConnectionBudget,
    private readonly redis: RedisClient,
    /** Slots per client, all gateways together (`calls.events.maxStreamsPerClient`). */
    readonly cap: number,
    /** Aborted when the gateway stops: held connections end (clients reconnect elsewhere). */
    private readonly shutdown: AbortSignal,
  ) {}

  /**
   * Takes a slot for this request. Call it before the handler's first await: the close
   * listener goes on synchronously, so a client that hangs up while the slot is being taken
   * (or while the handler awaits anything after) is noticed and its slot comes back. Throws
   * `too_many_streams` (429) when the client holds every slot, `unavailable` without Redis.
   */
  async hold(res: Response, client: Client): Promise<Held> {
    const gone = new AbortController();
    const abort = () => gone.abort();
    res.once('close', abort);
    this.shutdown.addEventListener('abort', abort, { once: true });
    // Authentication and the rate charge awaited before this handler ran: a client that left
    // then has already had its 'close', which no listener added now would hear.
    if (res.closed || this.shutdown.aborted) abort();
    let slot: HeldSlot | undefined | 'user';
    let ended = false;
    const release = () => {
      if (ended) return;
      ended = true;
      res.off('close', abort);
      this.shutdown.removeEventListener('abort', abort);
      if (typeof slot === 'object') slot.release();
    };
    gone.signal.addEventListener('abort', release, { once: true });
    // Nobody to answer: take no slot; the handler sees the aborted signal and stops.
    if (gone.signal.aborted) return { signal: gone.signal, release };
    try {
      const user =
        client.user === undefined
          ? undefined
          : {
              id: client.user,
              ...(client.perUser.streams === undefined ? {} : { cap: client.perUser.streams }),
            };
      slot = await guardRedis(() => this.budget.acquire(client.id, this.cap, user), this.redis);
    } catch (err) {
      release();
      throw err;
    }
    if (slot === 'user') {
      slot = undefined;
      release();
      const cap = client.perUser.streams ?? this.cap;
      throw new ApiError(
        'too_many_streams',
        `user "${client.user ?? ''}" of client "${client.id}" already holds ${cap} connections open (event streams, the approvals feed, MCP requests that wait); its limit is ${cap} (limits.perUser.streams)`,
        {
          headers: { 'Retry-After': String(RETRY_SECONDS) },
          details: { limit: cap, scope: 'user' },
        },
      );
    }
    if (!slot) {
      release();
      throw new ApiError(
        'too_many_streams',
        `client "${client.id}" already holds ${this.cap} connections open (event streams, the approvals feed, MCP requests that wait); its limit is ${this.cap}`,
        { headers: { 'Retry-After': String(RETRY_SECONDS) }, details: { limit: this.cap } },
      );
    }
    // Closed while the slot was being taken: the listener already ran, with no slot to give.
    if (ended) slot.release();
    return { signal: gone.signal, release };
  }
}
