/**
 * A worker's slots of one kind (fast, sandbox, session), shared by its consumers of that kind on
 * every Redis shard (docs/sharding.md#workers): the worker runs at most `size` such calls
 * whatever the number of shards, and a shard whose calls wait for a slot gets the next one
 * rather than a hot shard keeping every slot with BullMQ's fetch-next-on-completion.
 */
export class SlotPool {
  private taken = 0;
  /** Calls taken from a queue while no slot was free, each waiting for one, oldest first. */
  private readonly waiting: { who: object; grant: () => void }[] = [];
  /** Consumers whose loops wait for a free slot before they fetch. */
  private readonly parked = new Map<object, () => void>();

  /**
   * @param shared whether consumers of several shards share it: then a call whose shard goes
   *   down as it ends gives its slot back at once (QueueConsumer), rather than hold it for as
   *   long as that shard is down while the other shards' calls wait.
   */
  constructor(
    readonly size: number,
    readonly shared = false,
  ) {}

  get free(): number {
    return this.size - this.taken;
  }

  /**
   * A slot for a call `who` has just taken from its queue: at once if one is free, else the
   * first one freed after the calls already waiting (the call's lock is renewed meanwhile).
   */
  take(who: object): Promise<void> | undefined {
    if (this.taken < this.size && this.waiting.length === 0) {
      this.taken++;
      return undefined;
    }
    return new Promise<void>((grant) => this.waiting.push({ who, grant }));
  }

  /**
   * Withdraws `who`'s waiting call (its consumer stops): true if it had no slot yet; false if
   * it was granted one meanwhile, which the caller then releases.
   */
  withdraw(who: object): boolean {
    const i = this.waiting.findIndex((w) => w.who === who);
    if (i < 0) return false;
    this.waiting.splice(i, 1);
    return true;
  }

  /** A slot whatever the count: a call a late fetch took (it holds its lock already). */
  force(): void {
    this.taken++;
  }

  /** A slot freed: to the oldest waiting call, else free, and every parked loop looks again. */
  release(): void {
    // Over the size (a late fetch's call): the slot is gone, not passed on.
    const next = this.taken <= this.size ? this.waiting.shift() : undefined;
    if (next) {
      next.grant();
      return;
    }
    this.taken--;
    if (this.taken >= this.size) return;
    const wake = [...this.parked.values()];
    this.parked.clear();
    for (const w of wake) w();
  }

  /** Resolves once a slot is free (not taking it), or `wake` is called (a stop). */
  whenFree(who: object): Promise<void> {
    if (this.taken < this.size) return Promise.resolve();
    return new Promise<void>((resolve) => this.parked.set(who, resolve));
  }

  /** Ends a wait of `who`'s loop (its consumer stops). */
  wake(who: object): void {
    const w = this.parked.get(who);
    this.parked.delete(who);
    w?.();
  }

  /**
   * Whether a consumer other than `who` waits for a slot (a call it took, or its loop): then a
   * call of `who` that ends does not take its queue's next call in the same script, and its
   * slot goes to the other. With one consumer per pool (one shard) never.
   */
  contended(who: object): boolean {
    if (this.waiting.some((w) => w.who !== who)) return true;
    for (const p of this.parked.keys()) if (p !== who) return true;
    return false;
  }
}
