import { withoutAttachmentData } from '@toolgate/tools';
import type { CallResponse } from '../pipeline.js';
import type { BridgeSlot } from './types.js';

/** The text a model reads for one slot; `isError` tells dialects that flag failures. */
export function slotContent(slot: BridgeSlot): { text: string; isError: boolean } {
  const { response, error } = slot;
  if (error)
    return {
      text: JSON.stringify({ error: { code: error.code, message: error.message } }),
      isError: true,
    };
  if (!response)
    return {
      text: JSON.stringify({ error: { code: 'internal', message: 'no result' } }),
      isError: true,
    };
  return responseContent(response);
}

/** The text a model reads for a call's response, in every dialect and in MCP. */
export function responseContent(response: CallResponse): { text: string; isError: boolean } {
  if (response.kind === 'accepted') {
    const message =
      response.status === 'pending_approval'
        ? 'This call is awaiting approval by an administrator. It has not run yet; do not retry it.'
        : 'This call is still running. Its result will be available later; do not retry it.';
    return {
      text: JSON.stringify({ id: response.id, status: response.status, message }),
      isError: false,
    };
  }
  const { outcome } = response;
  // An error or a cancel: the model reads why (a cancelled call says who stopped it).
  if (outcome.status !== 'ok')
    return { text: JSON.stringify({ error: outcome.error }), isError: true };
  // An image's base64 is no text for a model: MCP sends it as an image block (mcp/tools.ts).
  return {
    text:
      typeof outcome.result === 'string'
        ? outcome.result
        : JSON.stringify(withoutAttachmentData(outcome.result ?? null)),
    isError: false,
  };
}

/** Parses a JSON-string `arguments` field; "" means no arguments. */
export function parseArguments(
  raw: unknown,
): { ok: true; value: unknown } | { ok: false; message: string } {
  if (raw === undefined || raw === null || raw === '') return { ok: true, value: {} };
  if (typeof raw !== 'string') {
    return typeof raw === 'object'
      ? { ok: true, value: raw }
      : { ok: false, message: 'arguments must be a JSON string' };
  }
  try {
    return { ok: true, value: JSON.parse(raw) };
  } catch (err) {
    return {
      ok: false,
      message: `arguments are not valid JSON (${(err as Error).message}); send a JSON object`,
    };
  }
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}
