import type { CallResponse } from '../pipeline.js';
import type { ApiError } from '../errors.js';

/** One tool call as a model produced it, in any dialect. */
export interface BridgeCall {
  /**
   * The tool call id echoed back to the model: the model's own, or a positional one
   * (`call_0`, `toolu_0`) when it sent none.
   */
  callId: string;
  /**
   * Whether `callId` came from the model. Only then is it the call's idempotency key: a
   * positional id means nothing outside this request (every conversation has a `call_0`).
   */
  modelId: boolean;
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
