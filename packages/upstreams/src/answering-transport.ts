/**
 * The SDK client's Streamable HTTP transport with the upstream's own requests taken out: each
 * goes to ServerRequests (bounded, over the reply connections), never to the SDK client, which
 * would answer every one with a POST of its own. Everything else passes through unchanged.
 */
import type {
  JSONRPCMessage,
  MessageExtraInfo,
  StreamableHTTPClientTransport,
  Transport,
  TransportSendOptions,
} from '@modelcontextprotocol/client';
import type { ServerMessage } from './http-call.js';

export class AnsweringTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T, extra?: MessageExtraInfo) => void;

  constructor(
    readonly inner: StreamableHTTPClientTransport,
    private readonly onRequest: (request: ServerMessage & { id: string | number }) => void,
  ) {}

  get sessionId(): string | undefined {
    return this.inner.sessionId;
  }

  get hasPerRequestStream(): boolean | undefined {
    return this.inner.hasPerRequestStream;
  }

  setProtocolVersion(version: string): void {
    this.inner.setProtocolVersion(version);
  }

  start(): Promise<void> {
    this.inner.onclose = () => this.onclose?.();
    this.inner.onerror = (error) => this.onerror?.(error);
    this.inner.onmessage = (message: JSONRPCMessage) => {
      const m = message as { id?: unknown; method?: unknown };
      if (typeof m.method === 'string' && m.id !== undefined && m.id !== null) {
        this.onRequest(message as unknown as ServerMessage & { id: string | number });
        return;
      }
      this.onmessage?.(message);
    };
    return this.inner.start();
  }

  send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    return this.inner.send(message, options);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
