/**
 * The call protocol of a pre-started container's entrypoint (deploy/sandbox/common/toolgate-entry):
 * it reads "TOOLGATE1 <argc> [<nonce>]\n", then each argument NUL-terminated, then the program's
 * own stdin; with a nonce it reports the program's exit in-band (ExitMarkerScanner).
 */
import { SandboxError } from './errors.js';

export function encodeEnvelope(
  argv: readonly string[],
  stdin?: string | Uint8Array,
  nonce?: string,
): Buffer {
  if (argv.length === 0) throw new SandboxError('invalid_request', 'argv must not be empty');
  if (nonce !== undefined && !/^[A-Za-z0-9]+$/.test(nonce))
    throw new SandboxError('invalid_request', 'bad nonce');
  const parts: Buffer[] = [
    Buffer.from(nonce ? `TOOLGATE1 ${argv.length} ${nonce}\n` : `TOOLGATE1 ${argv.length}\n`),
  ];
  for (const arg of argv) {
    if (arg.includes('\0'))
      throw new SandboxError('invalid_request', 'arguments cannot contain NUL bytes');
    parts.push(Buffer.from(arg, 'utf8'), Buffer.from([0]));
  }
  if (stdin !== undefined && stdin.length > 0)
    parts.push(typeof stdin === 'string' ? Buffer.from(stdin, 'utf8') : Buffer.from(stdin));
  return Buffer.concat(parts);
}

export interface ExitReport {
  exitCode: number;
  oomKills: number;
}

/**
 * Watches one output stream for the entrypoint's exit line ("\x1eTGEXIT <nonce> <status>
 * <oom kills>\n"), forwarding only what the program wrote before it. Output after the line
 * (a background process of the call) is dropped: the call is over.
 */
export class ExitMarkerScanner {
  private readonly marker: Buffer;
  private held: Buffer = Buffer.alloc(0);
  private tail: Buffer | undefined;
  report: ExitReport | undefined;

  constructor(
    nonce: string,
    private readonly forward: (b: Buffer) => void,
  ) {
    this.marker = Buffer.from(`\x1eTGEXIT ${nonce} `);
  }

  get done(): boolean {
    return this.report !== undefined;
  }

  push(chunk: Buffer): void {
    if (this.report) return;
    if (this.tail) {
      this.tail = Buffer.concat([this.tail, chunk]);
      this.parseTail();
      return;
    }
    const data = this.held.length ? Buffer.concat([this.held, chunk]) : chunk;
    const at = data.indexOf(this.marker);
    if (at >= 0) {
      if (at > 0) this.forward(data.subarray(0, at));
      this.held = Buffer.alloc(0);
      this.tail = data.subarray(at + this.marker.length);
      this.parseTail();
      return;
    }
    // Keep back what could be the start of a marker split across chunks.
    const keep = Math.min(data.length, this.marker.length - 1);
    let cut = data.length - keep;
    const partial = data.subarray(cut).indexOf(0x1e);
    cut = partial >= 0 ? cut + partial : data.length;
    if (cut > 0) this.forward(data.subarray(0, cut));
    this.held = Buffer.from(data.subarray(cut));
  }

  /** Call at end of stream: whatever was held back was output after all. */
  flush(): void {
    if (!this.report && this.held.length) this.forward(this.held);
    this.held = Buffer.alloc(0);
  }

  private parseTail(): void {
    const nl = this.tail!.indexOf(0x0a);
    if (nl < 0) return;
    const m = /^(\d+) (\d+)$/.exec(this.tail!.subarray(0, nl).toString('latin1'));
    this.report = m
      ? { exitCode: Number(m[1]), oomKills: Number(m[2]) }
      : { exitCode: 125, oomKills: 0 };
    this.tail = undefined;
  }
}
