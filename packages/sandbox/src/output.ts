/**
 * Collects one output stream up to a byte cap. Past the cap bytes are counted and dropped;
 * `flooding` turns true once the program has written `killFactor` times the cap, which is when
 * drivers kill it rather than let it burn CPU until the timeout.
 */
export class CappedOutput {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  private total = 0;

  constructor(
    private readonly cap: number,
    private readonly killFactor = 4,
  ) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    const room = this.cap - this.kept;
    if (room <= 0) return;
    const part = chunk.length <= room ? chunk : chunk.subarray(0, room);
    this.chunks.push(Buffer.from(part));
    this.kept += part.length;
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
