/**
 * The warm pool of one image (docker driver): sandboxes started ahead of their call, each
 * handed to exactly one call, replaced in the background. What a sandbox is and how it starts
 * is the driver's; how many to keep, who waits for the next one, and what to do when starting
 * fails is here.
 */
import { SandboxError } from './errors.js';

/** Sandboxes started at once per image while refilling; more only queue in the engine. */
const MAX_PARALLEL_STARTS = 3;
/**
 * How long the replacement of a taken sandbox waits for its call's refill(): past a quick
 * call's end (a warm hello world takes ~15–30 ms), short beside a start (~80–800 ms), so a long
 * call does not keep the pool short for its whole run.
 */
export const REFILL_DELAY_MS = 100;

export interface Pooled {
  createdAt: number;
  /** Stopped while waiting: never handed out. */
  dead: boolean;
}

export interface WarmPoolOptions<T extends Pooled> {
  key: string;
  size: number;
  /** Starts one sandbox, ready for a call. */
  start: () => Promise<T>;
  /** Removes one that will not be used. */
  dispose: (item: T) => Promise<void>;
  /** False while the pool must not start anything (driver closed, image missing). */
  canStart: () => boolean;
  onStartFailed: (err: unknown) => void;
  /** REFILL_DELAY_MS unless set (tests). */
  refillDelayMs?: number;
}

interface Waiter<T> {
  resolve: (item: T) => void;
  reject: (err: unknown) => void;
}

export class WarmPool<T extends Pooled> {
  private readonly ready: T[] = [];
  private readonly waiters: Waiter<T>[] = [];
  private starting = 0;
  /** Replacements of taken sandboxes not started yet, each with its deadline (see take()). */
  private readonly owed = new Set<NodeJS.Timeout>();
  /** Starts in flight: close() waits for them, or they would outlive the driver. */
  private readonly inFlight = new Set<Promise<unknown>>();
  private closed = false;
  /** How many to keep ready: the configured size, 0 once drained. */
  private target: number;

  constructor(private readonly o: WarmPoolOptions<T>) {
    this.target = o.size;
  }

  get key(): string {
    return this.o.key;
  }

  get size(): number {
    return this.target;
  }

  /** Sandboxes ready now. */
  get readyCount(): number {
    return this.ready.length;
  }

  /**
   * A ready sandbox, or the next one started; aborting the signal stops waiting. A ready one's
   * replacement is owed, not started: the caller calls refill() once its call's output is in.
   */
  acquire(signal?: AbortSignal): Promise<T> {
    while (this.ready.length > 0) {
      const item = this.ready.shift()!;
      if (!item.dead) {
        this.owe();
        return Promise.resolve(item);
      }
      void this.o.dispose(item);
      this.topUp();
    }
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new SandboxError('aborted', 'the call was cancelled before its sandbox started'));
      };
      const waiter: Waiter<T> = {
        resolve: (item) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(item);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
      this.topUp();
    });
  }

  /**
   * Starting a container is CPU (engine, runtime, kernel) that a call running beside it on the
   * same cores waits for: the replacement of a taken sandbox starts once the call is over
   * (refill()), or after refillDelayMs for a long call. Taking the last ready one starts them
   * all at once: the next call would wait for one.
   */
  private owe(): void {
    if (this.ready.length === 0) return this.topUp();
    const timer = setTimeout(() => this.refill(timer), this.o.refillDelayMs ?? REFILL_DELAY_MS);
    timer.unref();
    this.owed.add(timer);
  }

  /** A call that took a sandbox is over (or past refillDelayMs): start its replacement. */
  refill(timer?: NodeJS.Timeout): void {
    const paid = timer ?? this.owed.values().next().value;
    if (paid !== undefined) {
      clearTimeout(paid);
      this.owed.delete(paid);
    }
    this.topUp();
  }

  private forgive(): void {
    for (const timer of this.owed) clearTimeout(timer);
    this.owed.clear();
  }

  /**
   * Starts sandboxes until ready + starting covers the target size plus the waiting calls,
   * less the replacements owed to calls still running (all of them once none is ready).
   */
  topUp(): void {
    if (this.closed || !this.o.canStart()) return;
    if (this.ready.length === 0) this.forgive();
    while (
      this.starting < MAX_PARALLEL_STARTS &&
      this.ready.length + this.starting + this.owed.size < this.target + this.waiters.length
    ) {
      this.starting++;
      const started = this.o.start();
      this.inFlight.add(started);
      void started.then(
        () => this.inFlight.delete(started),
        () => this.inFlight.delete(started),
      );
      started
        .then((item) => {
          this.starting--;
          if (this.closed) return void this.o.dispose(item);
          const waiter = this.waiters.shift();
          if (waiter) waiter.resolve(item);
          // Started before a drain (or for a waiter that gave up): not wanted warm any more.
          else if (this.ready.length >= this.target) return void this.o.dispose(item);
          else this.ready.push(item);
          this.topUp();
        })
        .catch((err: unknown) => {
          this.starting--;
          this.o.onStartFailed(err);
          // Fail the calls waiting now rather than retrying in a tight loop.
          for (const w of this.waiters.splice(0))
            w.reject(
              new SandboxError(
                'start_failed',
                `sandbox container failed to start: ${(err as Error).message}`,
                { cause: err },
              ),
            );
        });
    }
  }

  /** Replaces ready sandboxes older than maxIdleMs (or found dead), so none lingers for days. */
  async recycle(maxIdleMs: number): Promise<void> {
    const now = Date.now();
    const stale = this.ready.filter((item) => item.dead || now - item.createdAt > maxIdleMs);
    for (const item of stale) {
      this.ready.splice(this.ready.indexOf(item), 1);
      await this.o.dispose(item);
    }
    this.topUp();
  }

  /**
   * Keeps none ready from now on and removes the ready ones (a worker that is stopping: what it
   * leaves warm outlives it if it is killed before close). Calls already waiting still get theirs.
   */
  async drain(): Promise<void> {
    this.target = 0;
    this.forgive();
    await Promise.all(this.ready.splice(0).map((item) => this.o.dispose(item)));
    // Those still starting are disposed of as they come up, unless a call waits for them.
    await Promise.allSettled([...this.inFlight]);
  }

  /** Fails the waiting calls, removes the ready sandboxes and those still starting. */
  async close(): Promise<void> {
    this.closed = true;
    this.forgive();
    for (const w of this.waiters.splice(0))
      w.reject(new SandboxError('closed', 'sandbox driver is closed'));
    await Promise.all(this.ready.splice(0).map((item) => this.o.dispose(item)));
    // Each start still in flight disposes of its sandbox once started (closed is set).
    await Promise.allSettled([...this.inFlight]);
  }
}
