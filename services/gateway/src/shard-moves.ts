/**
 * Client placements and moves between shards, as one gateway sees and runs them
 * (docs/sharding.md, "Moving a client"): which shard each client is on now (a move's placement
 * wins over the configured one), holding a moving client's requests, and running a move.
 */
import { randomUUID } from 'node:crypto';
import {
  ShardPlacements,
  callsInFlight,
  copyClientData,
  createRedis,
  deleteClientData,
  type Keys,
  type RedisClient,
  type ShardMoveRecord,
} from '@toolgate/calls';
import type { Shard, ShardMap } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ShardView } from './api-types.js';
import { ApiError } from './errors.js';

/** What a move needs of each shard's stack. */
export interface MoveShardSide {
  shard: Shard;
  redis: RedisClient;
  keys: Keys;
}

export interface ShardMovesOptions {
  shardMap: ShardMap;
  stacks: ReadonlyMap<string, MoveShardSide>;
  clientIds: ReadonlySet<string>;
  log: Logger;
  /** How long a move waits for the client's calls in flight to end before it gives up. */
  drainTimeoutMs: number;
  /** How long a moving client's request waits before 503 client_moving (default 60 s). */
  holdMs?: number;
  /** How often placements are re-read, in case a change message was missed (default 2 s). */
  refreshMs?: number;
  /** How long a move waits after marking the client moving, for every gateway to hear it. */
  settleMs?: number;
  /** The move lease (renewed a third of the way); a gateway gone this long loses its move. */
  leaseMs?: number;
}

/**
 * How long after its last call ended a client's data is copied: a worker writes a call's
 * record and audit entry ≤ 10 ms after the call leaves the in-flight set, a sandbox call's
 * stats ≤ 1 s after (services/worker/src/recorder.ts).
 */
const RECORD_LAG_MS = 1500;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class ShardMoves {
  private readonly placements: ShardPlacements;
  private readonly subscriber: RedisClient | undefined;
  private placed = new Map<string, string>();
  private moving = new Map<string, string>();
  private readonly wakers = new Set<() => void>();
  private readonly running = new Map<string, Promise<void>>();
  private readonly timer: NodeJS.Timeout | undefined;
  private readonly loaded: Promise<void>;
  private readonly holdMs: number;
  private readonly settleMs: number;
  private readonly leaseMs: number;
  private closed = false;

  constructor(private readonly o: ShardMovesOptions) {
    this.holdMs = o.holdMs ?? 60_000;
    this.settleMs = o.settleMs ?? 1000;
    this.leaseMs = o.leaseMs ?? 15_000;
    const home = o.stacks.get(o.shardMap.home.id)!;
    this.placements = new ShardPlacements(home.redis, home.keys);
    // One shard: nowhere to move to; no connection, no timer, nothing read.
    if (!o.shardMap.sharded) {
      this.loaded = Promise.resolve();
      return;
    }
    const subscriber = createRedis(o.shardMap.home.redis, 'blocking');
    this.subscriber = subscriber;
    subscriber.on('error', (err) => o.log.debug({ err: err.message }, 'redis error'));
    // Listener first, then the subscription: a message cannot come before it is listened for.
    subscriber.on('message', () => void this.refresh());
    subscriber.subscribe(home.keys.shardPlacementEvents).catch(() => undefined);
    // Requests wait for the first read (bounded: a home shard down does not hold them).
    this.loaded = Promise.race([this.refresh(), sleep(3000)]);
    this.timer = setInterval(() => void this.refresh(true), o.refreshMs ?? 2000);
    this.timer.unref();
  }

  /** The shard a client is on now: where a move put it, else its configured one. */
  shardOf(clientId: string): Shard {
    const moved = this.placed.get(clientId);
    return (
      (moved === undefined ? undefined : this.o.shardMap.byId(moved)) ??
      this.o.shardMap.of(clientId)
    );
  }

  /**
   * Waits while the client is moving (its new calls go to the new shard once it is there);
   * after `holdMs`, 503 client_moving with Retry-After.
   */
  async hold(clientId: string): Promise<void> {
    await this.loaded;
    if (!this.moving.has(clientId)) return;
    const until = Date.now() + this.holdMs;
    while (this.moving.has(clientId)) {
      const left = until - Date.now();
      if (left <= 0 || this.closed)
        throw new ApiError(
          'client_moving',
          `client "${clientId}" is being moved to another shard; try again shortly`,
          { headers: { 'Retry-After': '5' }, details: { move: this.moving.get(clientId) } },
        );
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(t);
          this.wakers.delete(wake);
          resolve();
        };
        const t = setTimeout(wake, Math.min(left, 500));
        this.wakers.add(wake);
      });
    }
  }

  /** Re-reads placements and moves; `sweep` also rolls back moves whose gateway is gone. */
  private async refresh(sweep = false): Promise<void> {
    try {
      const { placements, moving } = await this.placements.read();
      if (sweep && moving.size > 0) {
        const elsewhere = new Map([...moving].filter(([, id]) => !this.running.has(id)));
        const released = await this.placements.abandonLost(elsewhere);
        for (const client of released) {
          this.o.log.warn({ client }, 'shard move abandoned: its gateway stopped; client stays');
          moving.delete(client);
        }
      }
      this.placed = placements;
      this.moving = moving;
      for (const wake of [...this.wakers]) wake();
    } catch (err) {
      this.o.log.debug({ err }, 'could not read the shard placements');
    }
  }

  /** The shards with their state and clients. */
  shards(): ShardView[] {
    return this.o.shardMap.list.map((shard) => {
      const clients = [...this.o.clientIds].filter((c) => this.shardOf(c).id === shard.id);
      return {
        id: shard.id,
        home: shard.home,
        state: this.o.stacks.get(shard.id)?.redis.status === 'ready' ? 'up' : 'down',
        clients,
        moving: clients.filter((c) => this.moving.has(c)),
      };
    });
  }

  async get(id: string): Promise<ShardMoveRecord | undefined> {
    return this.placements.get(id);
  }

  /**
   * Starts moving a client to a shard (it runs here, in the background); answers its record.
   * 404 for a client that is not configured, 400 for an unknown shard, 409 when the client is
   * there already or a move of it runs.
   */
  async move(client: string, to: string): Promise<ShardMoveRecord> {
    if (!this.o.clientIds.has(client))
      throw new ApiError('not_found', `no client "${client}"`, { details: { client } });
    const target = this.o.shardMap.byId(to);
    if (!target)
      throw new ApiError(
        'invalid_request',
        `no shard "${to}" (shards: ${this.o.shardMap.list.map((s) => s.id).join(', ')})`,
        { details: { shard: to } },
      );
    await this.loaded;
    const from = this.shardOf(client);
    if (from.id === to)
      throw new ApiError('conflict', `client "${client}" is on shard "${to}" already`, {
        details: { client, shard: to },
      });
    const record: ShardMoveRecord = {
      id: randomUUID(),
      client,
      from: from.id,
      to,
      state: 'draining',
      inFlight: 0,
      keysCopied: 0,
      keysDeleted: 0,
      startedAt: new Date().toISOString(),
    };
    const begun = await this.placements.begin(record, this.leaseMs);
    if (!begun.started)
      throw new ApiError('conflict', `client "${client}" is being moved already`, {
        details: { move: begun.running },
      });
    this.moving.set(client, record.id);
    const run = this.run(record).finally(() => this.running.delete(record.id));
    this.running.set(record.id, run);
    return record;
  }

  private async run(m: ShardMoveRecord): Promise<void> {
    const log = this.o.log.child({ move: m.id, client: m.client, from: m.from, to: m.to });
    log.info('shard move started: new calls of the client wait');
    const from = this.o.stacks.get(m.from)!;
    const to = this.o.stacks.get(m.to)!;
    let lost = false;
    const lease = setInterval(() => {
      this.placements.renew(m.client, m.id, this.leaseMs).then(
        (ok) => (lost ||= !ok),
        () => undefined,
      );
    }, this.leaseMs / 3);
    lease.unref();
    let flipped = false;
    try {
      // Every gateway hears of the move (a message, else its next re-read) before calls are
      // counted: a call one admitted just before is in flight by then.
      await sleep(this.settleMs);
      let copied: Awaited<ReturnType<typeof copyClientData>> | undefined;
      // A late call (a gateway that had not heard yet) found after the copy: drain and copy again.
      for (let round = 0; round < 3 && !copied; round++) {
        if (await this.drain(m, from)) await sleep(RECORD_LAG_MS);
        if (lost || this.closed) throw new Error('the move was stopped');
        await this.placements.progress(m.id, { state: 'copying', inFlight: 0 });
        const data = await copyClientData(from, to, m.client, (n) =>
          this.placements.progress(m.id, { keysCopied: n }),
        );
        if ((await callsInFlight(from, m.client)) === 0) copied = data;
        else await this.placements.progress(m.id, { state: 'draining' });
      }
      if (!copied) throw new Error('calls kept arriving on the old shard during the copy');
      await this.placements.progress(m.id, { keysCopied: copied.count });
      if (!(await this.placements.finish(m, { state: 'cleaning', to: m.to })))
        throw new Error('the move lease was lost (another gateway rolled the move back)');
      flipped = true;
      await this.refresh();
      log.info({ keys: copied.count }, 'shard move: client placed on the new shard');
      const deleted = await deleteClientData(from, copied);
      await this.placements.progress(m.id, {
        state: 'done',
        keysDeleted: deleted,
        endedAt: new Date().toISOString(),
      });
      log.info({ deleted }, 'shard move done');
    } catch (err) {
      const message = (err as Error).message;
      log.warn({ err: message, flipped }, 'shard move failed');
      if (flipped) {
        await this.placements
          .progress(m.id, {
            state: 'failed',
            error: `moved, but the old copies were not all deleted: ${message}`,
            endedAt: new Date().toISOString(),
          })
          .catch(() => undefined);
      } else {
        await this.placements
          .finish(m, { state: 'failed', error: `${message}; the client stays where it was` })
          .catch(() => undefined);
        await this.refresh();
      }
    } finally {
      clearInterval(lease);
    }
  }

  /**
   * Waits until the client's calls in flight on its old shard have ended (bounded); true when
   * there were some to wait for.
   */
  private async drain(m: ShardMoveRecord, from: MoveShardSide): Promise<boolean> {
    const until = Date.now() + this.o.drainTimeoutMs;
    let last = -1;
    for (;;) {
      const n = await callsInFlight(from, m.client);
      if (n !== last) await this.placements.progress(m.id, { inFlight: n });
      if (n === 0) return last > 0;
      last = n;
      if (this.closed) throw new Error('the gateway is closing');
      if (Date.now() > until)
        throw new Error(
          `${n} call(s) still in flight on shard "${m.from}" after ${Math.round(this.o.drainTimeoutMs / 1000)} s`,
        );
      await sleep(200);
    }
  }

  /** Stops: a move that has not flipped yet is rolled back (its client stays). */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    for (const wake of [...this.wakers]) wake();
    await Promise.all(this.running.values());
    this.subscriber?.disconnect();
  }
}
