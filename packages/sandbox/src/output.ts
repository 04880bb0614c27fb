/**
 * Collects one output stream up to a byte cap. Past the cap bytes are counted and dropped;
 * `flooding` turns true once the program has written `killFactor` times the cap, which is when
 * drivers kill it rather than let it burn CPU until the timeout.
 */
const EMPTY = Buffer.alloc(0);

export class CappedOutput {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  private total = 0;

  constructor(
    private readonly cap: number,
    private readonly killFactor = 4,
  ) {}

  /** Adds a chunk; returns the part of it that was kept (empty past the cap). */
  push(chunk: Buffer): Buffer {
    this.total += chunk.length;
    const room = this.cap - this.kept;
    if (room <= 0) return EMPTY;
    const part = Buffer.from(chunk.length <= room ? chunk : chunk.subarray(0, room));
    this.chunks.push(part);
    this.kept += part.length;
    return part;
  }

  get truncated(): boolean {
    return this.total > this.kept;
  }

  get flooding(): boolean {
    return this.total > this.cap * this.killFactor;
  }

  get bytesWritten(): number {
    return this.total;
  }

  text(): string {
    // A multi-byte character cut at the cap decodes as U+FFFD rather than failing.
    return Buffer.concat(this.chunks).toString('utf8');
  }
}
