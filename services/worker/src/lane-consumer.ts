import {
  failedOutcome,
  outcomeEvent,
  type Lane,
  type LaneCall,
  type OutcomeEvent,
  type RedisClient,
  waitReady,
} from '@toolgate/calls';
import type { Logger } from '@toolgate/log';

/** How long an idle consumer blocks for new calls before it looks again (seconds). */
const WAIT_S = 2;

/**
 * Ends a call in its lane (one script: records its end, may publish it, may take the slot's
 * next call). `publish` false: the outcome goes out with the call's record instead.
 */
export type LaneEnd = (end: OutcomeEvent, publish: boolean) => Promise<void>;

/** What a slot hands the code that runs its call: the two ways a call leaves the slot. */
export interface LaneSlot {
  end: LaneEnd;
  /** Puts the call back in its queue for `delayMs` (its client runs its share already). */
  defer(delayMs: number): Promise<void>;
}

export interface LaneConsumerOptions {
  lane: Lane;
  /** A connection of its own for the blocking wait. */
  blocking: RedisClient;
  slots: number;
  /** A held call's lease: renewed every third of it, swept by any worker once it lapsed. */
  leaseMs: number;
  /** How often to sweep for calls of dead workers. */
  sweepEveryMs: number;
  /** How long a call handed out again may wait (its job key's life). */
  requeuedTtlMs: number;
  log: Logger;
  /** Runs one call (or puts it back); resolves once the call has left the slot. */
  handle(call: LaneCall, slot: LaneSlot): Promise<void>;
  /** A sweep handed out or failed calls of a dead worker. */
  onLost?: () => void;
}

/**
 * A worker's consumer of one queue (Lane): `slots` slots; a slot's call ends in one script
 * that takes the slot's next call, and an idle consumer blocks on the lane's wake key (or
 * until the next put-back call is due). Leases are renewed for every call held here in one
 * command; the sweep hands a dead worker's calls out again.
 */
export class LaneConsumer {
  private free: number;
  private readonly held = new Set<string>();
  private readonly slots = new Set<Promise<void>>();
  private slotFreed: (() => void) | undefined;
  private stopping = false;
  private loopDone: Promise<void> | undefined;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(private readonly o: LaneConsumerOptions) {
    this.free = o.slots;
  }

  /** Resolves once the blocking connection is up. */
  async ready(): Promise<void> {
    await waitReady(this.o.blocking);
  }

  start(): void {
    const { lane, log, leaseMs } = this.o;
    this.loopDone = this.loop();
    this.timers.push(
      setInterval(
        () => {
          lane
            .renew([...this.held], leaseMs)
            .catch((err: unknown) =>
              log.warn({ err: (err as Error).message, queue: lane.kind }, 'could not renew leases'),
            );
        },
        Math.max(100, Math.round(leaseMs / 3)),
      ),
      setInterval(() => this.sweep(), Math.max(100, this.o.sweepEveryMs)),
    );
  }

  /** Stops taking calls and waits for the ones held here. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const timer of this.timers) clearInterval(timer);
    this.slotFreed?.();
    // Ends a BZPOPMIN in progress; the loop sees `stopping` and returns.
    this.o.blocking.disconnect();
    await this.loopDone;
    await Promise.all(this.slots);
  }

  private sweep(): void {
    const { lane, log } = this.o;
    lane.sweep(this.o.requeuedTtlMs).then(
      ({ again, failed }) => {
        for (const callId of again) {
          log.warn({ callId, queue: lane.kind }, 'call of a dead worker moved on');
        }
        for (const callId of failed) {
          log.error({ callId, queue: lane.kind }, 'call failed: its workers stopped twice');
        }
        if (again.length + failed.length > 0) this.o.onLost?.();
      },
      (err: unknown) =>
        log.warn({ err: (err as Error).message, queue: lane.kind }, 'could not sweep the queue'),
    );
  }

  /**
   * Claims calls for the free slots; blocks on the wake key while there are none. A claim that
   * drained the queue is not followed by another (it would find nothing): the consumer waits
   * for the wake key, which every enqueue sets, or until the next put-back call is due.
   */
  private async loop(): Promise<void> {
    const { lane, log, leaseMs } = this.o;
    /** Whether the last claim failed: one warning per outage, not one per retry. */
    let failing = false;
    /** The last claim emptied the queue: wait before the next. */
    let drained = false;
    let nextDueAt: number | undefined;
    while (!this.stopping) {
      if (this.free === 0) {
        await new Promise<void>((resolve) => (this.slotFreed = resolve));
        continue;
      }
      if (drained) {
        drained = false;
        // Until a call arrives, or the next put-back one is due.
        const untilDue = nextDueAt === undefined ? WAIT_S : (nextDueAt - Date.now()) / 1000;
        const wait = Math.min(WAIT_S, Math.max(0.01, untilDue));
        await lane.waitForWork(this.o.blocking, Number(wait.toFixed(3))).catch(async () => {
          if (!this.stopping) await new Promise((r) => setTimeout(r, 500));
        });
        continue;
      }
      let claimed: Awaited<ReturnType<Lane['claim']>>;
      try {
        claimed = await lane.claim(this.free, leaseMs);
      } catch (err) {
        if (!failing) {
          log.warn(
            { err: (err as Error).message, queue: lane.kind },
            'could not take calls; trying again',
          );
        }
        failing = true;
        await new Promise((r) => setTimeout(r, 500));
        continue;
      }
      if (failing) log.info({ queue: lane.kind }, 'taking calls again');
      failing = false;
      ({ drained, nextDueAt } = claimed);
      for (const call of claimed.calls) {
        this.free--;
        const slot: Promise<void> = this.slot(call).finally(() => {
          this.slots.delete(slot);
          this.free++;
          const wake = this.slotFreed;
          this.slotFreed = undefined;
          wake?.();
        });
        this.slots.add(slot);
      }
    }
  }

  /** Runs calls in one slot, each call's end taking the next waiting one. */
  private async slot(first: LaneCall): Promise<void> {
    const { lane, log, leaseMs } = this.o;
    let next: LaneCall | undefined = first;
    while (next) {
      const call: LaneCall = next;
      next = undefined;
      this.held.add(call.job.id);
      let settled = false;
      const slot: LaneSlot = {
        end: async (end, publish) => {
          settled = true;
          [next] = await lane.finish(
            call.job,
            { json: JSON.stringify(end.outcome), event: JSON.stringify(end) },
            { claimNext: !this.stopping, leaseMs, publish },
          );
        },
        defer: async (delayMs) => {
          settled = true;
          await lane.defer(call, delayMs);
        },
      };
      try {
        await this.o.handle(call, slot);
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        log.error({ callId: call.job.id, err: reason }, 'call failed outside the tool');
        // Not ended: end it failed (no record is written, as for any call failed outside its
        // tool). Ended but failed after: its end is in; a lost FINISH lets its lease lapse.
        if (!settled) {
          const outcome = failedOutcome(call.job.id, call.job.tool, reason);
          await lane
            .finish(
              call.job,
              { json: JSON.stringify(outcome), event: JSON.stringify(outcomeEvent(outcome)) },
              { claimNext: false, leaseMs, failed: reason },
            )
            .catch(() => undefined);
        }
      } finally {
        this.held.delete(call.job.id);
      }
    }
  }
}
