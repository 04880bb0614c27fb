/** Field names whose values never reach logs, audit entries or listings. */
const SECRET_FIELD =
  /pass(word|phrase)?|secret|token|api[-_]?key|^key$|[-_]key$|authorization|cookie|credential|private/i;
const BEARER = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/g;
const MAX_STRING = 500;
const MAX_DEPTH = 8;
const MAX_ITEMS = 50;

/**
 * A copy of `value` safe to store in the audit log: secret-looking fields replaced, bearer
 * tokens inside strings masked, long strings, deep nesting and long arrays cut.
 */
export function redact(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') {
    const masked = value.replace(BEARER, '$1 [redacted]');
    return masked.length > MAX_STRING
      ? `${masked.slice(0, MAX_STRING)}…(${masked.length} chars)`
      : masked;
  }
  if (value === null || typeof value !== 'object') return value;
  if (depth >= MAX_DEPTH) return '[…]';
  if (Array.isArray(value)) {
    const items = value.slice(0, MAX_ITEMS).map((v) => redact(v, depth + 1));
    if (value.length > MAX_ITEMS) items.push(`…(${value.length - MAX_ITEMS} more)`);
    return items;
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    Object.defineProperty(out, k, {
      value: SECRET_FIELD.test(k) ? '[redacted]' : redact(v, depth + 1),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}
