import type { CallOutcome, CallRecord } from '@toolgate/calls';

type Listener = (outcome: CallOutcome) => void;

interface Poll {
  listeners: Set<Listener>;
  timer: NodeJS.Timeout | undefined;
}

/**
 * The safety net under a call's live events: if its outcome message is lost (the subscriber
 * was reconnecting), a re-read of the call's record finds the outcome. One re-read per call
 * and interval on this gateway, shared by everyone here who watches that call: 300 watchers
 * of one call cost Redis what one does.
 */
export class OutcomePolls {
  private readonly polls = new Map<string, Poll>();

  constructor(private readonly lookup: (id: string) => Promise<CallRecord | undefined>) {}

  /** Calls `onOutcome` once a re-read finds the call ended, until the returned function is called. */
  watch(id: string, everyMs: number, onOutcome: Listener): () => void {
    const key = `${everyMs}:${id}`;
    let poll = this.polls.get(key);
    if (!poll) {
      const created: Poll = { listeners: new Set(), timer: undefined };
      const tick = () => {
        created.timer = setTimeout(() => {
          this.lookup(id).then(
            (record) => {
              if (this.polls.get(key) !== created) return;
              if (record?.outcome) for (const l of [...created.listeners]) l(record.outcome);
              if (this.polls.get(key) === created) tick();
            },
            () => {
              if (this.polls.get(key) === created) tick();
            },
          );
        }, everyMs);
        created.timer.unref();
      };
      this.polls.set(key, (poll = created));
      tick();
    }
    const mine = poll;
    mine.listeners.add(onOutcome);
    return () => {
      if (!mine.listeners.delete(onOutcome) || mine.listeners.size > 0) return;
      clearTimeout(mine.timer);
      if (this.polls.get(key) === mine) this.polls.delete(key);
    };
  }

  /** Calls re-read on this gateway now (for tests). */
  get size(): number {
    return this.polls.size;
  }
}
