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
  /**
   * Where: `description`, `title`, or a JSON pointer into a schema (`/inputSchema/...`); `''`
   * for the flag that says more flags were left out.
   */
  at: string;
  /** The match is in the name of the property `at` points to, not in its value. */
  key?: true;
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
 * Characters a person reviewing a definition cannot see: every default-ignorable code point
 * (zero-width and joiner characters, variation selectors U+FE00–FE0F and U+E0100–E01EF, which
 * can carry a byte each, the tag block U+E0000–E0FFF of ASCII smuggling, Hangul fillers, the
 * BOM, soft hyphen) and every format character (bidi embeddings, overrides and isolates: Trojan
 * Source). A run of them is one match.
 */
const HIDDEN = /[\p{Default_Ignorable_Code_Point}\p{Cf}]+/gu;
/** A text-or-emoji selector after an emoji (`⚠️`): what it is for, so not flagged alone. */
const PRESENTATION = /^[\uFE0E\uFE0F]$/u;
const EMOJI_BEFORE = /\p{Emoji}$/u;
/** Where nesting stops being read. */
const MAX_DEPTH = 64;

/** Tokens that can be tool names: looked up in the set of other tools' names. */
const TOKEN = /[A-Za-z0-9][A-Za-z0-9_.-]{2,127}/g;

/**
 * The flags of `def`. `otherNames` are names of tools that are not this upstream's (toolgate
 * names, and other upstreams' own names): mentioning one is flagged. Property names are text
 * too (a model reads them); what is not read — past SCAN_MAX_CHARS, nested deeper than 64
 * levels — is flagged `scan_truncated`, so silence means it was all read.
 */
export function scanDefinition(
  def: UpstreamToolDefinition,
  otherNames: ReadonlySet<string>,
): ScanFlag[] {
  const flags: ScanFlag[] = [];
  const seen = new Set<string>();
  let dropped = false;
  const add = (code: ScanFlagCode, at: string, match: string, key?: boolean) => {
    const id = `${code}\0${at}\0${match}\0${key === true}`;
    if (seen.has(id)) return;
    if (flags.length >= MAX_FLAGS) {
      dropped = true;
      return;
    }
    seen.add(id);
    flags.push({ code, at, match: visible(match).slice(0, MATCH_MAX), ...(key ? { key } : {}) });
  };
  let budget = SCAN_MAX_CHARS;
  for (const item of texts(def)) {
    if ('deep' in item) {
      add('scan_truncated', item.at, `nested deeper than ${MAX_DEPTH} levels: not read`);
      continue;
    }
    const { at, text, key } = item;
    const part = text.length > budget ? text.slice(0, budget) : text;
    budget -= part.length;
    for (const re of INSTRUCTIONS) {
      const m = re.exec(part);
      if (m) add('model_instructions', at, m[0], key);
    }
    const tag = TAGS.exec(part);
    if (tag) add('hidden_tags', at, tag[0], key);
    const sensitive = SENSITIVE.exec(part);
    if (sensitive) add('sensitive_paths', at, sensitive[0], key);
    const hidden = hiddenRun(part);
    if (hidden !== undefined) add('hidden_unicode', at, hidden, key);
    // A property named like another tool steers nothing by itself (and `query` is common).
    if (otherNames.size > 0 && !key) {
      for (const token of part.match(TOKEN) ?? []) {
        // A sentence's full stop is not part of a name.
        const name = token.replace(/\.+$/, '');
        if (name !== def.name && otherNames.has(name)) add('other_tool_name', at, name);
      }
    }
    if (part.length < text.length) {
      // The rest is not read: the flag says an admin must read it themselves.
      add('scan_truncated', at, `more than ${SCAN_MAX_CHARS} characters of text`, key);
      break;
    }
  }
  if (dropped)
    flags.push({
      code: 'scan_truncated',
      at: '',
      match: `more than ${MAX_FLAGS} flags: the rest are not shown`,
    });
  return flags;
}

/** The first run of invisible characters in `text`, but an emoji's presentation selector. */
function hiddenRun(text: string): string | undefined {
  for (const m of text.matchAll(HIDDEN)) {
    if (PRESENTATION.test(m[0]) && EMOJI_BEFORE.test(text.slice(Math.max(0, m.index - 2), m.index)))
      continue;
    return m[0];
  }
  return undefined;
}

type Text = { at: string; text: string; key?: true } | { at: string; deep: true };

/** The human-readable strings of a definition (property names too), each with where it is. */
function* texts(def: UpstreamToolDefinition): Generator<Text> {
  if (def.title) yield { at: 'title', text: def.title };
  if (def.description) yield { at: 'description', text: def.description };
  for (const key of ['inputSchema', 'outputSchema', 'annotations'] as const) {
    if (def[key]) yield* strings(def[key], `/${key}`, 0);
  }
}

/** Every string in a schema, values and property names, with its JSON pointer. */
function* strings(value: unknown, at: string, depth: number): Generator<Text> {
  if (typeof value === 'string') {
    yield { at, text: value };
  } else if (value && typeof value === 'object') {
    // Definitions are ≤ 64 KiB of JSON, yet that nests thousands deep: the stack stays small,
    // and what is below is said to be unread.
    if (depth >= MAX_DEPTH) {
      yield { at, deep: true };
    } else if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) yield* strings(value[i], `${at}/${i}`, depth + 1);
    } else {
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        const path = `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`;
        yield { at: path, text: k, key: true };
        yield* strings(v, path, depth + 1);
      }
    }
  }
}

/** Invisible and control characters as `U+XXXX`, so the console shows what is there. */
function visible(text: string): string {
  return text.replace(
    /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}]/gu,
    (c) => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`,
  );
}
