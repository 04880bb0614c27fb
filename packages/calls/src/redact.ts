/**
 * What reaches audit entries and approval listings instead of the arguments a client sent:
 * secrets masked, size and work bounded whatever the input's shape. Table-driven (the rules
 * below, one test each in redact.test.ts): the patterns are ours to read and bound, and it runs
 * on the call path, where a general secret scanner would cost more than the call.
 */

/** Field names whose values never reach logs, audit entries or listings. */
const SECRET_NAME = new RegExp(
  [
    'pass(?:word|phrase|wd)?',
    'secret',
    'token',
    'api[-_.]?key',
    '(?:access|signing|encryption|master)[-_.]?key',
    '^key$',
    '[-_.]key$',
    '(?:^|[-_.])auth(?:$|[-_.])',
    'authenticat',
    'authoriz',
    'cookie',
    'credential',
    'private',
    'signature',
    '^sig$',
    '^session(?:[-_.]?(?:id|key))?$',
  ].join('|'),
  'i',
);

/** Only this much of a name is tested: a key longer than that is shown cut anyway. */
const NAME_HEAD = 256;
const NAME_TAIL = 64;

export function isSecretName(name: string): boolean {
  if (name.length <= NAME_HEAD + NAME_TAIL) return SECRET_NAME.test(name);
  return SECRET_NAME.test(name.slice(0, NAME_HEAD)) || SECRET_NAME.test(name.slice(-NAME_TAIL));
}

export interface RedactionRule {
  name: string;
  pattern: RegExp;
  replace: string;
}

/**
 * Secrets recognised by their shape inside any text. Every pattern is linear: no quantified
 * group is followed by another that can match the same characters.
 */
export const TEXT_RULES: readonly RedactionRule[] = [
  {
    name: 'bearer or basic credentials (any case)',
    pattern: /\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}/gi,
    replace: '$1$2[redacted]',
  },
  {
    name: 'cookie header line (every cookie in it)',
    pattern: /^([ \t]*(?:set-)?cookie[ \t]*:)[^\r\n]*/gim,
    replace: '$1 [redacted]',
  },
  {
    name: 'password in a URL (scheme://user:password@host)',
    pattern: /\b([a-z][a-z0-9+.-]{0,15}:\/\/[^\s/?#@:]{0,128}):[^\s/?#@]{1,256}@/gi,
    replace: '$1:[redacted]@',
  },
  {
    name: 'OpenAI / Anthropic key (sk-…)',
    pattern: /\bsk-[A-Za-z0-9_-]{16,}/g,
    replace: '[redacted]',
  },
  {
    name: 'Stripe key (sk_live_…, rk_test_…)',
    pattern: /\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}/g,
    replace: '[redacted]',
  },
  {
    name: 'GitHub token (ghp_…, gho_…, github_pat_…)',
    pattern: /\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})/g,
    replace: '[redacted]',
  },
  {
    name: 'Slack token (xoxb-…, xoxp-…, xapp-…)',
    pattern: /\bx(?:ox[a-z]|app)-[A-Za-z0-9-]{10,}/g,
    replace: '[redacted]',
  },
  {
    name: 'JSON Web Token (eyJ….….…)',
    pattern: /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g,
    replace: '[redacted]',
  },
  {
    name: 'AWS access key id (AKIA…, ASIA…)',
    pattern: /\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b/g,
    replace: '[redacted]',
  },
  { name: 'Google API key (AIza…)', pattern: /\bAIza[A-Za-z0-9_-]{35}/g, replace: '[redacted]' },
  {
    name: 'PEM private key block',
    pattern:
      /-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]{0,40}PRIVATE KEY-----|$)/g,
    replace: '[redacted private key]',
  },
];

/**
 * `name: value` / `name=value` / `"name": "value"` in text (header lines, query strings, form
 * bodies, JSON inside a string field, JSON escaped once more). Only the name and separator are
 * matched here, so scanning goes on inside values of harmless names; the value of a secret name
 * is then taken by VALUE from where the separator ends. A name starts where a run of name
 * characters starts (the lookbehind), so each run is tried once: linear in the text.
 */
const NAME_SEP = /(\\{0,3}["']|)(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]{1,128})\1\s{0,16}[:=]\s{0,16}/g;
/** A value: double-quoted with escapes, single-quoted, behind an escaped quote, or bare. */
const VALUE =
  /(")((?:[^"\\\n]|\\.){0,4096})|(')([^'\n]{0,4096})|(\\{1,3}["'])([^"'\\\n]{0,4096})|()([^\s"'\\,;&}\])]{1,4096})/y;

/** Text looked at per string: what is shown plus room for a token that starts before the cut. */
const MAX_STRING = 500;
const SCAN = MAX_STRING + 512;
const MAX_KEY = 64;
const MAX_DEPTH = 8;
const MAX_ITEMS = 50;
/** Per redact() call: values visited, and characters of output (roughly, its JSON size). */
const MAX_NODES = 500;
const MAX_OUTPUT = 3000;

/** Masks every secret the rules recognise in `text` (any length: callers pass a bounded slice). */
export function maskText(text: string): string {
  // Every shape above is at least 14 characters, and a named value needs ":" or "=".
  if (text.length < 14 && !text.includes(':') && !text.includes('=')) return text;
  let out = text;
  for (const rule of TEXT_RULES) out = out.replace(rule.pattern, rule.replace);
  // After the shapes: a named value masked first would hide "Bearer" from its rule.
  return maskNamedValues(out);
}

function maskNamedValues(text: string): string {
  let out = '';
  let copied = 0;
  NAME_SEP.lastIndex = 0;
  for (let m = NAME_SEP.exec(text); m; m = NAME_SEP.exec(text)) {
    if (!isSecretName(m[2]!)) continue;
    const start = NAME_SEP.lastIndex;
    VALUE.lastIndex = start;
    const v = VALUE.exec(text);
    if (!v) continue;
    const open = v[1] ?? v[3] ?? v[5] ?? v[7] ?? '';
    const secret = v[2] ?? v[4] ?? v[6] ?? v[8] ?? '';
    if (secret.length === 0 || secret.startsWith('[redacted')) continue;
    out += `${text.slice(copied, start + open.length)}[redacted]`;
    copied = start + open.length + secret.length;
    NAME_SEP.lastIndex = copied;
  }
  return copied === 0 ? text : out + text.slice(copied);
}

interface Budget {
  nodes: number;
  output: number;
}

/**
 * A copy of `value` safe to store: secret-named fields replaced, secret-shaped text masked,
 * long strings and keys, deep nesting, long arrays and large objects cut. Work and output are
 * bounded by a budget of MAX_NODES values and about MAX_OUTPUT characters, whatever the input;
 * what is left out is said (`…(N more)`). The one cost outside the budget is the engine listing
 * an object's keys, linear in that object's size (the gateway refuses bodies with objects over
 * 10,000 keys).
 */
export function redact(value: unknown): unknown {
  return visit(value, 0, { nodes: MAX_NODES, output: MAX_OUTPUT });
}

function visit(value: unknown, depth: number, budget: Budget): unknown {
  budget.nodes--;
  if (typeof value === 'string') return text(value, budget);
  if (typeof value === 'bigint') return String(value);
  if (value === null || typeof value !== 'object') {
    budget.output -= 6;
    return value;
  }
  if (depth >= MAX_DEPTH) {
    budget.output -= 5;
    return '[…]';
  }
  budget.output -= 2;
  if (Array.isArray(value)) {
    const items: unknown[] = [];
    const shown = Math.min(value.length, MAX_ITEMS);
    let i = 0;
    for (; i < shown && budget.nodes > 0 && budget.output > 0; i++) {
      items.push(visit(value[i], depth + 1, budget));
      budget.output -= 1;
    }
    if (i < value.length) items.push(`…(${value.length - i} more)`);
    return items;
  }
  const out: Record<string, unknown> = {};
  const keys = Object.keys(value);
  let i = 0;
  for (; i < keys.length && budget.nodes > 0 && budget.output > 0; i++) {
    const key = keys[i]!;
    let shown = key.length > MAX_KEY ? `${key.slice(0, MAX_KEY)}…` : key;
    if (Object.hasOwn(out, shown)) shown = `${shown}#${i}`; // two long keys cut alike
    budget.output -= shown.length + 4;
    const v = isSecretName(key)
      ? '[redacted]'
      : visit((value as Record<string, unknown>)[key], depth + 1, budget);
    // defineProperty: a "__proto__" key stays plain data, never the copy's prototype.
    Object.defineProperty(out, shown, {
      value: v,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  if (i < keys.length) {
    Object.defineProperty(out, '…', {
      value: `${keys.length - i} more keys`,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

function text(value: string, budget: Budget): string {
  const room = Math.max(0, Math.min(MAX_STRING, budget.output));
  const masked = maskText(value.length > SCAN ? value.slice(0, SCAN) : value);
  const shown =
    masked.length > room || value.length > SCAN
      ? `${masked.slice(0, room)}…(${value.length} chars)`
      : masked;
  budget.output -= shown.length + 2;
  return shown;
}

/**
 * A copy of `value` (JSON data: a call's outcome, an event) with every occurrence of the given
 * secret values — a call's injected credentials — replaced by `[redacted]` in its strings.
 * Exact occurrences only: encodings (base64, URL-encoding) of a value are not recognised.
 */
export function redactValues<T>(value: T, secrets: ReadonlySet<string>): T {
  if (secrets.size === 0 || value === undefined) return value;
  // In JSON text every string is escaped: the escaped form of each secret finds it in strings
  // and keys at any depth, in one pass over a text the size of the value.
  const needles = [...secrets]
    .filter((s) => s.length > 0)
    .map((s) => JSON.stringify(s).slice(1, -1))
    .sort((a, b) => b.length - a.length); // a secret containing another goes whole
  const text = JSON.stringify(value);
  let out = text;
  for (const n of needles) if (out.includes(n)) out = out.split(n).join('[redacted]');
  if (out === text) return value;
  try {
    return JSON.parse(out) as T;
  } catch {
    // A match that ran into the JSON's own quoting (a secret ending in a backslash): the
    // value cannot be kept readable, and must not be kept as it was.
    return '[redacted: the value contained a secret]' as T;
  }
}
