import type { Tool } from '@toolgate/registry';
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

/** What a dialect's listing sees of its request. */
export interface ListingRequest {
  /** One query parameter: undefined when absent; given twice, 400 `invalid_request`. */
  option(name: string): string | undefined;
  /** Every tool the client may call, before `?q`, `?category` and `?limit`: what options may name. */
  readonly visible: readonly Tool[];
}

/**
 * One provider API, all of it: its tool listing, how its tool calls are found in what a model
 * produced, and how results go back. Registered once in `index.ts`.
 */
export interface Dialect {
  /** `?dialect=` on POST /v1/tool-calls, and `dialect` in its answer. */
  readonly name: string;
  /** The listing's route: `GET /tools/<listingPath>`. */
  readonly listingPath: string;
  /**
   * The provider's `tools` array. `tools` come scoped to the client, filtered and in their
   * stable order; a bad option throws ApiError `invalid_request`.
   */
  listing(tools: readonly Tool[], request: ListingRequest): unknown[];
  /** The tool calls in `body`, or undefined when `body` is not this dialect. */
  extract(body: Record<string, unknown> | unknown[]): BridgeCall[] | undefined;
  format(slots: BridgeSlot[]): Record<string, unknown>;
}
