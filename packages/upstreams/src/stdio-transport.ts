/**
 * The MCP SDK's Transport over a long-lived sandbox's stdio (SandboxDriver.open): what the
 * SDK's StdioClientTransport does for a host process, for a stdio server that runs inside a
 * sandbox. One JSON-RPC message per line each way; the SDK client multiplexes calls by id.
 */
import {
  ReadBuffer,
  SdkError,
  SdkErrorCode,
  serializeMessage,
  type JSONRPCMessage,
  type Transport,
} from '@modelcontextprotocol/client';
import type { ProcessExit, SandboxProcess } from '@toolgate/sandbox';

/** Largest single message read from a server (one line of JSON): past it the session ends. */
export const STDIO_MAX_MESSAGE_BYTES = 8 * 1024 * 1024;
/** stderr kept per line for the log; a longer line is cut. */
const STDERR_LINE_MAX = 4096;

export interface SandboxStdioTransportOptions {
  /** Starts the sandbox running the server (driver.open with the upstream's argv). */
  open: () => Promise<SandboxProcess>;
  /** One line the server wrote to stderr (its log), cut at 4096 characters. */
  onStderr?: (line: string) => void;
  /** How the server's sandbox ended, once it has (a crash, or close()). */
  onExit?: (exit: ProcessExit) => void;
}

export class SandboxStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  private process: SandboxProcess | undefined;
  private readonly buffer = new ReadBuffer({ maxBufferSize: STDIO_MAX_MESSAGE_BYTES });
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
    process.stdout.on('data', (chunk: Buffer) => {
      try {
        this.buffer.append(chunk);
      } catch (err) {
        // Over the size bound: no way to find the next message's start, so the session ends.
        this.onerror?.(err as Error);
        void this.close();
        return;
      }
      for (;;) {
        let message: JSONRPCMessage | null;
        try {
          message = this.buffer.readMessage();
        } catch (err) {
          // A line that is not JSON-RPC (a stray print): reported, and the next line read.
          this.onerror?.(err as Error);
          continue;
        }
        if (message === null) break;
        this.onmessage?.(message);
      }
    });
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
      this.buffer.clear();
      this.options.onExit?.(exit);
      this.onclose?.();
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
