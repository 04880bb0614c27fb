import type { CallResponse } from '../pipeline.js';
import type { ApiError } from '../errors.js';

/** One tool call as a model produced it, in any dialect. */
export interface BridgeCall {
  /** The dialect's tool call id; also the call's idempotency key. */
  callId: string;
  name: string;
  /** Parsed arguments, or why they could not be parsed. */
  args: { ok: true; value: unknown } | { ok: false; message: string };
}

export interface BridgeSlot {
  call: BridgeCall;
  response?: CallResponse;
  error?: ApiError;
}

export interface Dialect {
  readonly name: 'openai-chat' | 'openai-responses' | 'anthropic';
  /** The tool calls in `body`, or undefined when `body` is not this dialect. */
  extract(body: Record<string, unknown> | unknown[]): BridgeCall[] | undefined;
  format(slots: BridgeSlot[]): Record<string, unknown>;
}
