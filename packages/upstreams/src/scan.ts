/**
 * Looks for known tool-poisoning patterns in an upstream tool's definition: text addressed to
 * the model instead of describing the tool, characters a person reviewing it cannot see, and
 * names of other tools (a description that steers how another server's tool is used). It
 * flags, it never blocks: an admin reads the flags before approving (docs/upstreams.md).
 */
import type { UpstreamToolDefinition } from './tool.js';

export type ScanFlagCode =
  | 'model_instructions'
  | 'hidden_tags'
  | 'hidden_unicode'
  | 'sensitive_paths'
  | 'other_tool_name'
  | 'scan_truncated';

export interface ScanFlag {
  code: ScanFlagCode;
  /** Where: `description`, `title`, or a JSON pointer into a schema (`/inputSchema/...`). */
  at: string;
  /** What matched, ≤ 80 characters, invisible characters written as `U+XXXX`. */
  match: string;
}

/** Characters of text scanned per definition; the rest is flagged `scan_truncated`. */
export const SCAN_MAX_CHARS = 64 * 1024;
/** Flags kept per definition. */
const MAX_FLAGS = 20;
const MATCH_MAX = 80;

/**
 * Text that speaks to the model rather than about the tool. Each is linear (no nested
 * quantifiers): the scan's cost is bounded by SCAN_MAX_CHARS.
 */
const INSTRUCTIONS: readonly RegExp[] = [
  /\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|earlier|other)\s+(?:instructions?|prompts?|rules?|messages?)/i,
  /\b(?:do\s+not|don't|never)\s+(?:tell|inform|mention|reveal|show|notify)\b[^.\n]{0,40}\buser\b/i,
  /\b(?:without|before)\s+(?:telling|informing|notifying|asking)\s+the\s+user\b/i,
  /\bsystem\s+prompt\b/i,
  /\byou\s+(?:are\s+now|must\s+now|must\s+always|must\s+first)\b/i,
  /\b(?:this|the)\s+(?:is\s+)?(?:very\s+)?important\s*:\s*(?:always|never|before|you)\b/i,
];

/** Pseudo-markup that hides instructions from a reader skimming a UI: `<IMPORTANT>`, `<system>`. */
const TAGS =
  /<\/?\s*(?:important|system|instructions?|secret|hidden|admin|assistant|prompt|context)\b[^>]{0,40}>/i;

/** Files and secrets a tool description has no business naming. */
const SENSITIVE =
  /(?:~\/\.ssh|\bid_rsa\b|\bid_ed25519\b|\/etc\/(?:passwd|shadow)|\.aws\/credentials|\.env\b|\bmcp\.json\b|\bprivate[\s_-]key\b)/i;

/**
 * Zero-width and joiner characters, bidi embeddings/overrides/isolates (Trojan Source), the
 * BOM, soft hyphen, invisible math operators and the tag block (ASCII smuggling).
 */
const HIDDEN =
  /[\u00AD\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF]|[\u{E0000}-\u{E007F}]/u;

/** Tokens that can be tool names: looked up in the set of other tools' names. */
const TOKEN = /[A-Za-z0-9][A-Za-z0-9_.-]{2,127}/g;

/**
 * The flags of `def`. `otherNames` are names of tools that are not this upstream's (toolgate
 * names, and other upstreams' own names): mentioning one is flagged.
 */
export function scanDefinition(
  def: UpstreamToolDefinition,
  otherNames: ReadonlySet<string>,
): ScanFlag[] {
  const flags: ScanFlag[] = [];
  const seen = new Set<string>();
  const add = (code: ScanFlagCode, at: string, match: string) => {
    const key = `${code}\0${at}\0${match}`;
    if (flags.length >= MAX_FLAGS || seen.has(key)) return;
    seen.add(key);
    flags.push({ code, at, match: visible(match).slice(0, MATCH_MAX) });
  };
  let budget = SCAN_MAX_CHARS;
  for (const [at, text] of texts(def)) {
    const part = text.length > budget ? text.slice(0, budget) : text;
    budget -= part.length;
    for (const re of INSTRUCTIONS) {
      const m = re.exec(part);
      if (m) add('model_instructions', at, m[0]);
    }
    const tag = TAGS.exec(part);
    if (tag) add('hidden_tags', at, tag[0]);
    const sensitive = SENSITIVE.exec(part);
    if (sensitive) add('sensitive_paths', at, sensitive[0]);
    const hidden = HIDDEN.exec(part);
    if (hidden) add('hidden_unicode', at, hidden[0]);
    if (otherNames.size > 0) {
      for (const token of part.match(TOKEN) ?? []) {
        // A sentence's full stop is not part of a name.
        const name = token.replace(/\.+$/, '');
        if (name !== def.name && otherNames.has(name)) add('other_tool_name', at, name);
      }
    }
    if (part.length < text.length) {
      // The rest is not read: the flag says an admin must read it themselves.
      add('scan_truncated', at, `more than ${SCAN_MAX_CHARS} characters of text`);
      break;
    }
  }
  return flags;
}

/** The human-readable strings of a definition, each with where it is. */
function* texts(def: UpstreamToolDefinition): Generator<[string, string]> {
  if (def.title) yield ['title', def.title];
  if (def.description) yield ['description', def.description];
  for (const key of ['inputSchema', 'outputSchema', 'annotations'] as const) {
    if (def[key]) yield* strings(def[key], `/${key}`, 0);
  }
}

/** Every string value in a schema, with its JSON pointer. */
function* strings(value: unknown, at: string, depth: number): Generator<[string, string]> {
  // Definitions are ≤ 64 KiB of JSON: depth is bounded by that, this cut keeps the stack small.
  if (depth > 64) return;
  if (typeof value === 'string') {
    yield [at, value];
  } else if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) yield* strings(value[i], `${at}/${i}`, depth + 1);
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      const path = `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`;
      yield* strings(v, path, depth + 1);
    }
  }
}

/** Invisible and control characters as `U+XXXX`, so the console shows what is there. */
function visible(text: string): string {
  return text.replace(
    /[\p{Cc}\u00AD\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF]|[\u{E0000}-\u{E007F}]/gu,
    (c) => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`,
  );
}
