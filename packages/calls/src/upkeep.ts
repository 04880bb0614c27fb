/**
 * When a key's upkeep — the trim that caps it, the expiry that ends it, the set that lists it —
 * was last sent from this process. Upkeep need not ride on every write to a key: once per
 * interval per key, or sooner once enough has been added since, holds the same bound at a
 * fraction of the commands (issue 20: Redis commands are the ceiling of every deployment).
 * A key trimmed this way holds at most its cap plus `maxAdded` between trims.
 */
export class Upkeep {
  private readonly last = new Map<string, { at: number; added: number }>();

  constructor(
    private readonly everyMs: number,
    /** Keys remembered at most; past it the memory starts over (every key due once more). */
    private readonly maxKeys = 10_000,
  ) {}

  /**
   * Whether `key`'s upkeep is due now, counting `added` more items written to it: true at the
   * first write, then once `everyMs` has passed or `maxAdded` items were added since.
   */
  due(key: string, added = 1, maxAdded = Infinity, now = Date.now()): boolean {
    const seen = this.last.get(key);
    if (seen && now - seen.at < this.everyMs && seen.added + added < maxAdded) {
      seen.added += added;
      return false;
    }
    if (!seen && this.last.size >= this.maxKeys) this.last.clear();
    this.last.set(key, { at: now, added: 0 });
    return true;
  }
}
