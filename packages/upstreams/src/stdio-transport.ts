/**
 * The MCP SDK's Transport over a long-lived sandbox's stdio (SandboxDriver.open): what the
 * SDK's StdioClientTransport does for a host process, for a stdio server that runs inside a
 * sandbox. One JSON-RPC message per line each way; the SDK client multiplexes calls by id.
 */
import {
  deserializeMessage,
  SdkError,
  SdkErrorCode,
  serializeMessage,
  type JSONRPCMessage,
  type Transport,
} from '@modelcontextprotocol/client';
import type { ProcessExit, SandboxProcess } from '@toolgate/sandbox';

/**
 * Largest single message read from a server (one line of JSON). A longer one is skipped to its
 * end of line and its request answered with STDIO_OVERSIZE_ERROR; when its id cannot be found,
 * the session ends.
 */
export const STDIO_MAX_MESSAGE_BYTES = 8 * 1024 * 1024;
/**
 * The JSON-RPC error code of the answer put in place of an oversized response (in the range
 * JSON-RPC leaves to implementations); the connection turns it into `output_limit`.
 */
export const STDIO_OVERSIZE_ERROR = -32099;
/**
 * The JSON-RPC error code the owner answers a follower's request with when its server could not
 * take it (not started, crashed, timed out); the follower's connection turns it into
 * `upstream_unavailable`.
 */
export const STDIO_SHARED_UNAVAILABLE = -32098;
/**
 * Bytes kept of each end of an oversized line to find its id: every JSON-RPC library writes the
 * id first (`{"jsonrpc":"2.0","id":…`) or last (the MCP SDK: `…,"jsonrpc":"2.0","id":…}`).
 */
const ID_WINDOW = 256;
/** stderr kept per line for the log; a longer line is cut. */
const STDERR_LINE_MAX = 4096;

export interface SandboxStdioTransportOptions {
  /** Starts the sandbox running the server (driver.open with the upstream's argv). */
  open: () => Promise<SandboxProcess>;
  /** One line the server wrote to stderr (its log), cut at 4096 characters. */
  onStderr?: (line: string) => void;
  /**
   * A `notifications/message` from the server, as it is read: before the SDK sees the lines
   * after it, so a log written just before a call's answer still finds the call running.
   */
  onLog?: (level: string, data: unknown) => void;
  /**
   * A notification toolgate's own peer sends (a shared server's owner state): taken here when it
   * returns true, never handed to the SDK.
   */
  intercept?: (method: string, params: unknown) => boolean;
  /** How the server's sandbox ended, once it has (a crash, or close()). */
  onExit?: (exit: ProcessExit) => void;
}

export class SandboxStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  private process: SandboxProcess | undefined;
  /** The current line's bytes so far (≤ STDIO_MAX_MESSAGE_BYTES). */
  private line: Buffer[] = [];
  private lineBytes = 0;
  /** The ends of an oversized line being skipped (its middle is dropped as it arrives). */
  private skipping: { head: Buffer; tail: Buffer } | undefined;
  private started = false;
  private closed = false;

  constructor(private readonly options: SandboxStdioTransportOptions) {}

  /** The running sandbox (for stats and signals); undefined before start and after the end. */
  get sandbox(): SandboxProcess | undefined {
    return this.process;
  }

  async start(): Promise<void> {
    if (this.started) throw new Error('SandboxStdioTransport already started');
    this.started = true;
    const process = await this.options.open();
    if (this.closed) {
      await process.kill();
      throw new SdkError(SdkErrorCode.ConnectionClosed, 'the transport was closed while starting');
    }
    this.process = process;
    process.stdout.on('data', (chunk: Buffer) => this.read(chunk));
    // Read always (a server blocked on a full stderr pipe stops answering), kept line by line.
    let partial = '';
    process.stderr.setEncoding('utf8');
    process.stderr.on('data', (text: string) => {
      partial += text;
      let nl: number;
      while ((nl = partial.indexOf('\n')) >= 0) {
        this.options.onStderr?.(partial.slice(0, Math.min(nl, STDERR_LINE_MAX)));
        partial = partial.slice(nl + 1);
      }
      if (partial.length > STDERR_LINE_MAX) {
        this.options.onStderr?.(partial.slice(0, STDERR_LINE_MAX));
        partial = '';
      }
    });
    void process.exited.then((exit) => {
      this.process = undefined;
      this.line = [];
      this.lineBytes = 0;
      this.skipping = undefined;
      this.options.onExit?.(exit);
      this.onclose?.();
    });
  }

  /** Splits stdout into lines, each one message; an oversized line is skipped, not held. */
  private read(chunk: Buffer): void {
    let from = 0;
    while (from < chunk.length) {
      const nl = chunk.indexOf(0x0a, from);
      const part = chunk.subarray(from, nl < 0 ? chunk.length : nl);
      from = nl < 0 ? chunk.length : nl + 1;
      if (this.skipping) {
        this.skipping.tail = keepTail(this.skipping.tail, part);
      } else if (this.lineBytes + part.length > STDIO_MAX_MESSAGE_BYTES) {
        const line = Buffer.concat([...this.line, part]);
        this.skipping = {
          head: line.subarray(0, ID_WINDOW),
          tail: Buffer.from(line.subarray(-ID_WINDOW)),
        };
        this.line = [];
        this.lineBytes = 0;
      } else if (part.length > 0) {
        // Copied only when kept past this chunk (a whole line in one chunk is parsed in place).
        this.line.push(part);
        this.lineBytes += part.length;
      }
      if (nl >= 0) this.endLine();
    }
    // What stays of this chunk is referenced, not copied: make it independent of the chunk.
    if (this.line.length > 0 && this.line.at(-1)!.buffer === chunk.buffer)
      this.line[this.line.length - 1] = Buffer.from(this.line.at(-1)!);
  }

  private endLine(): void {
    if (this.skipping) {
      const { head, tail } = this.skipping;
      this.skipping = undefined;
      this.oversized(head, tail);
      return;
    }
    const text = Buffer.concat(this.line).toString('utf8').replace(/\r$/, '');
    this.line = [];
    this.lineBytes = 0;
    if (!text.trim()) return;
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(text);
    } catch (err) {
      // A line that is not JSON-RPC (a stray print): reported, and the next line read.
      this.onerror?.(err as Error);
      return;
    }
    if (
      this.options.intercept &&
      'method' in message &&
      !('id' in message) &&
      this.options.intercept(message.method, message.params)
    )
      return;
    if (
      this.options.onLog &&
      'method' in message &&
      message.method === 'notifications/message' &&
      !('id' in message)
    ) {
      // Not handed to the SDK: it has no use for them, and a server flooding them would cost
      // its schema checks on each.
      const params = (message.params ?? {}) as { level?: unknown; data?: unknown };
      this.options.onLog(typeof params.level === 'string' ? params.level : 'info', params.data);
      return;
    }
    this.onmessage?.(message);
  }

  /**
   * A message over STDIO_MAX_MESSAGE_BYTES was skipped: the request it answers gets an error
   * in its place and the session goes on. Without an id to answer, the request would wait for
   * its timeout, so the session ends instead (its calls answer at once).
   */
  private oversized(head: Buffer, tail: Buffer): void {
    const id = idOf(head.toString('latin1'), tail.toString('latin1'));
    const error = new SdkError(
      SdkErrorCode.ConnectionClosed,
      `a message from the server passed ${STDIO_MAX_MESSAGE_BYTES} bytes`,
    );
    this.onerror?.(error);
    if (id === undefined) {
      void this.close();
      return;
    }
    this.onmessage?.({
      jsonrpc: '2.0',
      id,
      error: { code: STDIO_OVERSIZE_ERROR, message: error.message },
    });
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.process?.stdin;
    if (!stdin || stdin.writableEnded || stdin.destroyed)
      return Promise.reject(new SdkError(SdkErrorCode.NotConnected, 'Not connected'));
    return new Promise((resolve, reject) => {
      stdin.write(serializeMessage(message), (err) =>
        err
          ? reject(
              new SdkError(SdkErrorCode.ConnectionClosed, `the server is gone: ${err.message}`),
            )
          : resolve(),
      );
    });
  }

  /** Ends the server's sandbox (every process of it); onclose follows once it is gone. */
  async close(): Promise<void> {
    this.closed = true;
    await this.process?.kill();
  }
}

/** The last ID_WINDOW bytes of `tail` followed by `part`. */
function keepTail(tail: Buffer, part: Buffer): Buffer {
  if (part.length >= ID_WINDOW) return Buffer.from(part.subarray(-ID_WINDOW));
  return Buffer.concat([tail, part]).subarray(-ID_WINDOW);
}

const ID_VALUE = String.raw`(-?\d{1,15}|"(?:[^"\\]|\\.){0,64}")`;
/** `{"id":…` or `{"jsonrpc":"2.0","id":…` at the very start: the top level's id. */
const ID_FIRST = new RegExp(
  String.raw`^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*${ID_VALUE}\s*[,}]`,
);
/** `,"id":…}` at the very end (one closing brace: the top level's, not a nested object's). */
const ID_LAST = new RegExp(String.raw`[,{]\s*"id"\s*:\s*${ID_VALUE}\s*\}\s*\r?$`);

/** The JSON-RPC id of a message from the ends of its text, when either shows it. */
function idOf(head: string, tail: string): string | number | undefined {
  const raw = ID_FIRST.exec(head)?.[1] ?? ID_LAST.exec(tail)?.[1];
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw) as string | number;
  } catch {
    return undefined;
  }
}
