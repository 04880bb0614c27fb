import type { CallOutcome } from './types.js';

/** Put where a string was cut; short, so a cut always saves more than it adds. */
const MARK = '…[truncated]';
const MARK_BYTES = Buffer.byteLength(MARK);

/**
 * The copy of an outcome that may be stored: its `result` and `error` together fit in
 * `maxBytes` of JSON. Over that, the longest strings (stdout, stderr, a body) are cut at
 * their end to a common length, so the stored copy keeps its shape; when that is not enough (a huge array
 * of small values), the result becomes a text preview of its JSON. Either way the copy says
 * so in `resultTruncated`. Outcomes within the cap are returned as they are.
 */
export function capOutcome(outcome: CallOutcome, maxBytes: number): CallOutcome {
  const text = JSON.stringify({ result: outcome.result, error: outcome.error });
  const originalBytes = Buffer.byteLength(text);
  if (originalBytes <= maxBytes) return outcome;
  const resultTruncated = { originalBytes, maxBytes };
  // JSON.parse of what would be stored: a deep copy the cuts may change.
  const payload = JSON.parse(text) as Pick<CallOutcome, 'result' | 'error'>;
  cutLongestStrings(payload, originalBytes - maxBytes);
  const shaped = { ...outcome, ...payload, resultTruncated };
  if (payloadBytes(shaped) <= maxBytes) return shaped;
  return { ...outcome, ...preview(outcome, maxBytes), resultTruncated };
}

function payloadBytes(o: Pick<CallOutcome, 'result' | 'error'>): number {
  return Buffer.byteLength(JSON.stringify({ result: o.result, error: o.error }));
}

/**
 * Cuts the longest strings down to one common length, the longest that removes at least
 * `over` bytes of JSON, so stdout and stderr both keep their beginnings. Removing n UTF-16
 * units from a string removes at least n bytes of its JSON, so the count is a lower bound.
 */
function cutLongestStrings(root: object, over: number): void {
  const leaves: { parent: Record<string, unknown>; key: string; value: string }[] = [];
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node !== 'object' || node === null) continue;
    const parent = node as Record<string, unknown>;
    for (const [key, value] of Object.entries(parent)) {
      if (typeof value === 'string') leaves.push({ parent, key, value });
      else if (typeof value === 'object' && value !== null) stack.push(value);
    }
  }
  const saved = (level: number) =>
    leaves.reduce((sum, { value }) => sum + Math.max(0, value.length - level - MARK_BYTES), 0);
  // The highest level that saves enough (saved() falls as the level rises); 0 if none does.
  let low = 0;
  let high = leaves.reduce((m, { value }) => Math.max(m, value.length), 0);
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (saved(mid) >= over) low = mid;
    else high = mid - 1;
  }
  for (const { parent, key, value } of leaves) {
    if (value.length - low - MARK_BYTES <= 0) continue;
    // Never split a surrogate pair.
    const keep = low > 0 && isHighSurrogate(value.charCodeAt(low - 1)) ? low - 1 : low;
    parent[key] = value.slice(0, keep) + MARK;
  }
}

/** The last resort: the result as the start of its JSON text, the error message cut. */
function preview(outcome: CallOutcome, maxBytes: number): Pick<CallOutcome, 'result' | 'error'> {
  const resultText = JSON.stringify(outcome.result) ?? '';
  const error = outcome.error
    ? { code: outcome.error.code.slice(0, 200), message: outcome.error.message.slice(0, 2000) }
    : undefined;
  // JSON escaping can double a string's size; halve until it fits.
  for (let n = Math.min(resultText.length, maxBytes); n > 0; n = Math.floor(n / 2)) {
    let end = n;
    if (isHighSurrogate(resultText.charCodeAt(end - 1))) end--;
    const candidate = { result: resultText.slice(0, end) + MARK, ...(error ? { error } : {}) };
    if (payloadBytes(candidate) <= maxBytes) return candidate;
  }
  return { result: MARK, ...(error ? { error: { code: error.code, message: MARK } } : {}) };
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
