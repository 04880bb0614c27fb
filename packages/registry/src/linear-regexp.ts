/**
 * The regular-expression engine of every tool schema (Ajv's `code.regExp`): each `pattern` and
 * `patternProperties` key runs on RE2 (re2js), in time linear in the string, never on V8's
 * backtracking RegExp. A pattern is written in ECMAScript syntax (JSON Schema says so), so it
 * is checked by V8 first and then rewritten where RE2 reads the same text differently.
 */
import { RE2Set } from 're2js';

/** A pattern toolgate does not enforce, and why (`GET /v1/upstreams`, docs/upstreams.md). */
export interface UnenforcedPattern {
  /** JSON Pointer of the `pattern` (or the `patternProperties` key) in the schema. */
  path: string;
  pattern: string;
  reason: string;
}

/** Ajv's RegExpEngine: called once per pattern when a schema is compiled. */
export interface RegExpEngine {
  (pattern: string, flags: string): { test(s: string): boolean };
  code: string;
}

/** A pattern RE2 cannot run (lookaround, backreferences, …): the message says which. */
export class UnenforceablePatternError extends Error {
  constructor(
    readonly pattern: string,
    readonly reason: string,
  ) {
    super(`pattern ${JSON.stringify(pattern)} cannot run in linear time: ${reason}`);
    this.name = 'UnenforceablePatternError';
  }
}

/**
 * Bounds on what a schema toolgate does not control (an upstream's) may cost. Linear is not
 * cheap when both sides are large: re2js spends 10–100 ns per character and instruction
 * where its DFA gives up for the NFA, and compiling costs ~5–80 µs per instruction (`(?:ab){999}` is
 * 2,000 of them in 11 characters). A foreign pattern past a bound is left to the upstream,
 * which checks its own schema; our own schemas' patterns are always enforced.
 */
export const FOREIGN_PATTERN_LIMITS = {
  /** Work of one validation (one call's arguments, one result): characters × instructions. */
  work: 5_000_000,
  /** Instructions (as estimated before compiling) of all the patterns of one tool. */
  toolSize: 10_000,
} as const;

/** Instructions one pattern may compile to, estimated before compiling (any schema). */
export const PATTERN_SIZE_MAX = 10_000;

type Compiled =
  { ok: true; rx: { test(s: string): boolean }; size: number } | { ok: false; reason: string };

/**
 * Memory of one pattern's DFA cache, by its size. re2js keeps up to 8 MB per pattern by
 * default, and a hostile pattern run on a hostile string fills it: ~5 MB each, kept, for every
 * pattern of an upstream's. A set of one pattern (`RE2Set`) takes a bound; past it RE2 falls
 * back to its NFA, still linear. A set also runs on the DFA where a lone pattern would take
 * re2js's one-pass matcher, 3–4x slower on long strings. Ordinary patterns stay in the DFA
 * with ~0.5 KB per instruction.
 */
const dfaMemory = (size: number) => Math.max(256 * 1024, size * 512);

/** Compiled patterns shared by every schema of the process; cleared when it grows past this. */
const CACHE_MAX = 4096;
const cache = new Map<string, Compiled>();

/** Compiles `pattern` (ECMAScript syntax, flags "u" or "") for RE2, or says why it cannot. */
export function compileLinear(pattern: string, flags = 'u'): Compiled {
  const key = `${flags}/${pattern}`;
  let compiled = cache.get(key);
  if (compiled) return compiled;
  // Invalid ECMAScript stays an invalid schema, as with Ajv's own engine (compiling a RegExp
  // is linear in the pattern; only matching backtracks).
  new RegExp(pattern, flags);
  try {
    const { text, size } = translate(pattern);
    if (size > PATTERN_SIZE_MAX)
      throw new Unsupported(
        `too large: about ${size} RE2 instructions (at most ${PATTERN_SIZE_MAX})`,
      );
    const set = new RE2Set(RE2Set.UNANCHORED, 0, dfaMemory(size));
    set.add(text);
    set.compile();
    compiled = {
      ok: true,
      rx: { test: (s: string) => set.match(s).length > 0 },
      size: set.prog.numInst(),
    };
  } catch (err) {
    compiled = {
      ok: false,
      reason:
        err instanceof Unsupported
          ? err.message
          : `RE2 does not take it (${(err as Error).message.replace(/^error parsing regexp: /, '')})`,
    };
  }
  if (cache.size >= CACHE_MAX) cache.clear();
  cache.set(key, compiled);
  return compiled;
}

/** For our own schemas: every pattern enforced; one RE2 cannot run fails the schema. */
export const linearRegExp: RegExpEngine = Object.assign(
  (pattern: string, flags: string) => {
    const compiled = compileLinear(pattern, flags);
    if (!compiled.ok) throw new UnenforceablePatternError(pattern, compiled.reason);
    const { rx } = compiled;
    return { test: (s: string) => rx.test(s), toString: () => `/${pattern}/${flags}` };
  },
  { code: 'toolgateLinearRegExp' },
);

/**
 * The state of the foreign schema compiled or validated now (both are synchronous): what is
 * left of the work budget, and the patterns of the schema being compiled that are not
 * enforced (unenforceablePatterns said so).
 */
export class PatternWork {
  left: number = FOREIGN_PATTERN_LIMITS.work;
  skip: ReadonlySet<string> = new Set();

  reset(): void {
    this.left = FOREIGN_PATTERN_LIMITS.work;
  }
}

/**
 * For schemas of elsewhere (an upstream's): a pattern RE2 cannot run, or past the tool's size
 * budget, is not checked here (the upstream checks its own schema; `unenforceablePatterns`
 * reports it), and checks stop once `work` is spent.
 */
export function foreignRegExp(work: PatternWork): RegExpEngine {
  return Object.assign(
    (pattern: string, flags: string) => {
      const compiled = work.skip.has(pattern) ? undefined : compileLinear(pattern, flags);
      if (!compiled?.ok) return { test: () => true, toString: () => `unenforced:/${pattern}/` };
      const { rx, size } = compiled;
      return {
        test: (s: string) => {
          const cost = (s.length + 1) * size;
          if (cost > work.left) return true;
          work.left -= cost;
          return rx.test(s);
        },
        toString: () => `/${pattern}/${flags}`,
      };
    },
    { code: 'toolgateForeignRegExp' },
  );
}

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Keywords whose values are data, not schemas: a `pattern` in there is no pattern. */
const DATA_KEYWORDS = new Set(['const', 'enum', 'default', 'examples', 'example']);

/** A tool's patterns compiled so far, against FOREIGN_PATTERN_LIMITS.toolSize. */
export interface SizeBudget {
  left: number;
  /** Patterns already counted (or left out): each is compiled once. */
  seen: Map<string, string | undefined>;
}

export function sizeBudget(size: number = FOREIGN_PATTERN_LIMITS.toolSize): SizeBudget {
  return { left: size, seen: new Map() };
}

/**
 * Every `pattern` and `patternProperties` key of `schema` that RE2 cannot run, with its JSON
 * Pointer (`base` before it); with `budget`, also those past it (estimated before compiling).
 * Patterns V8 does not take either are reported too.
 */
export function unenforceablePatterns(
  schema: unknown,
  base = '',
  budget?: SizeBudget,
): UnenforcedPattern[] {
  const out: UnenforcedPattern[] = [];
  const reasonOf = (pattern: string): string | undefined => {
    if (budget?.seen.has(pattern)) return budget.seen.get(pattern);
    let reason: string | undefined;
    try {
      const size = budget ? translate(pattern).size : 0;
      if (budget && size <= PATTERN_SIZE_MAX && size > budget.left)
        reason = `the tool's patterns pass ${FOREIGN_PATTERN_LIMITS.toolSize} RE2 instructions`;
      else {
        const compiled = compileLinear(pattern);
        if (!compiled.ok) reason = compiled.reason;
        else if (budget) budget.left -= size;
      }
    } catch (err) {
      reason =
        err instanceof Unsupported
          ? err.message
          : `not a valid ECMAScript pattern (${(err as Error).message})`;
    }
    budget?.seen.set(pattern, reason);
    return reason;
  };
  const check = (path: string, pattern: string) => {
    const reason = reasonOf(pattern);
    if (reason !== undefined) out.push({ path, pattern, reason });
  };
  const visit = (node: unknown, path: string, depth: number) => {
    if (depth > 64) return; // deeper than Ajv would compile in time anyway
    if (Array.isArray(node)) {
      node.forEach((v, i) => visit(v, `${path}/${i}`, depth + 1));
      return;
    }
    if (!isObject(node)) return;
    for (const [key, value] of Object.entries(node)) {
      const at = `${path}/${pointer(key)}`;
      if (DATA_KEYWORDS.has(key)) continue;
      if (key === 'pattern' && typeof value === 'string') check(at, value);
      else if (key === 'patternProperties' && isObject(value)) {
        for (const [p, sub] of Object.entries(value)) {
          check(`${at}/${pointer(p)}`, p);
          visit(sub, `${at}/${pointer(p)}`, depth + 1);
        }
      } else if (key === 'properties' && isObject(value)) {
        // property names are names, whatever they are called
        for (const [name, sub] of Object.entries(value))
          visit(sub, `${at}/${pointer(name)}`, depth + 1);
      } else visit(value, at, depth + 1);
    }
  };
  visit(schema, base, 0);
  return out;
}

function pointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

// ---------------------------------------------------------------------------------------------
// ECMAScript (the `u` flag) → RE2 syntax. The input is valid ECMAScript (V8 compiled it), so
// only the constructs whose meaning differs are rewritten: `.`, `\s`, `\S`, `[^]`, `[]`, `[`
// inside a class, `\b` inside a class, `\0`, `\cX`, `\xHH`, `\u…`, `\p{…=…}` and the long
// names of general categories. Lookaround, backreferences and the `m`/`s` modifiers have no
// linear-time equivalent here: Unsupported.

class Unsupported extends Error {}

const hex = (code: number) => `\\x{${code.toString(16).toUpperCase()}}`;
/** ECMAScript's WhiteSpace and LineTerminator: `\s`. */
const WS =
  '\\t\\n\\x{B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}';
/** Its complement, as ranges (usable inside a class, where `[^…]` cannot nest). */
const NOT_WS =
  '\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{FEFE}\\x{FF00}-\\x{10FFFF}';
/** `.` without the `s` flag: anything but a line terminator. */
const DOT = '[^\\n\\r\\x{2028}\\x{2029}]';
const ANY = '\\x{0}-\\x{10FFFF}';

/** ECMAScript's long General_Category names, as RE2 knows them (it takes the short ones). */
const CATEGORY: Record<string, string> = {
  Letter: 'L',
  Uppercase_Letter: 'Lu',
  Lowercase_Letter: 'Ll',
  Titlecase_Letter: 'Lt',
  Modifier_Letter: 'Lm',
  Other_Letter: 'Lo',
  Mark: 'M',
  Combining_Mark: 'M',
  Nonspacing_Mark: 'Mn',
  Spacing_Mark: 'Mc',
  Enclosing_Mark: 'Me',
  Number: 'N',
  Decimal_Number: 'Nd',
  digit: 'Nd',
  Letter_Number: 'Nl',
  Other_Number: 'No',
  Punctuation: 'P',
  punct: 'P',
  Connector_Punctuation: 'Pc',
  Dash_Punctuation: 'Pd',
  Open_Punctuation: 'Ps',
  Close_Punctuation: 'Pe',
  Initial_Punctuation: 'Pi',
  Final_Punctuation: 'Pf',
  Other_Punctuation: 'Po',
  Symbol: 'S',
  Math_Symbol: 'Sm',
  Currency_Symbol: 'Sc',
  Modifier_Symbol: 'Sk',
  Other_Symbol: 'So',
  Separator: 'Z',
  Space_Separator: 'Zs',
  Line_Separator: 'Zl',
  Paragraph_Separator: 'Zp',
  Other: 'C',
  Control: 'Cc',
  cntrl: 'Cc',
  Format: 'Cf',
  Surrogate: 'Cs',
  Private_Use: 'Co',
  Unassigned: 'Cn',
};

/**
 * The pattern in RE2's syntax, meaning what it means in ECMAScript with the `u` flag, and the
 * size of its program as RE2's parser reckons it (repetitions expanded), before compiling.
 */
export function translate(source: string): { text: string; size: number } {
  let out = '';
  // One frame per open group: the size of its finished alternatives, of the current one, of
  // the last atom (what a quantifier repeats), and how many alternatives.
  const frames = [{ alts: 0, seq: 0, last: 0, count: 0, capture: false }];
  let frame = frames[0]!;
  const atom = (size: number) => {
    frame.seq += size;
    frame.last = size;
  };
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (c === '\\') {
      const [text, length] = escape(source, i, false);
      out += text;
      i += length;
      atom(1);
    } else if (c === '[') {
      const [text, length] = charClass(source, i);
      out += text;
      i += length;
      atom(1);
    } else if (c === '.') {
      out += DOT;
      i++;
      atom(1);
    } else if (c === '(') {
      let text = '(';
      let length = 1;
      if (source[i + 1] === '?') [text, length] = group(source, i);
      out += text;
      i += length;
      frame = {
        alts: 0,
        seq: 0,
        last: 0,
        count: 0,
        capture: text === '(' || text.startsWith('(?<'),
      };
      frames.push(frame);
    } else if (c === ')') {
      out += c;
      i++;
      const done = frames.pop()!;
      frame = frames[frames.length - 1]!;
      atom(done.alts + done.seq + done.count + (done.capture ? 2 : 0));
    } else if (c === '|') {
      out += c;
      i++;
      frame.alts += frame.seq;
      frame.count++;
      frame.seq = 0;
      frame.last = 0;
    } else if (c === '*' || c === '+' || c === '?') {
      out += c;
      i++;
      frame.seq += c === '*' ? 2 : 1;
      frame.last = 0; // a `?` after a quantifier makes it lazy: no new instructions
    } else if (c === '{') {
      const end = source.indexOf('}', i);
      const [min = 0, max] = source
        .slice(i + 1, end)
        .split(',')
        .map((n) => (n === '' ? undefined : Number(n)));
      const bounded = source.slice(i + 1, end).includes(',') ? max : min;
      // as RE2's parser counts a repeat: x{n,m} is m copies and m−n choices, x{n,} n copies
      frame.seq +=
        bounded === undefined
          ? min === 0
            ? 2
            : 1 + (min - 1) * frame.last
          : (bounded - 1) * frame.last + (bounded - min);
      frame.last = 0;
      out += source.slice(i, end + 1);
      i = end + 1;
    } else {
      out += c;
      i++;
      atom(1);
    }
  }
  return { text: out, size: frame.alts + frame.seq + frame.count };
}

function group(s: string, i: number): [string, number] {
  const next = s[i + 2];
  if (next === ':') return ['(?:', 3];
  if (next === '=' || next === '!') throw new Unsupported('lookahead');
  if (next === '<') {
    if (s[i + 3] === '=' || s[i + 3] === '!') throw new Unsupported('lookbehind');
    const end = s.indexOf('>', i);
    return [s.slice(i, end + 1), end + 1 - i]; // a named group: RE2 takes (?<name>…) as it is
  }
  // A modifier group (?i:…), (?-i:…): RE2 reads `i` the same; `m` and `s` change what `^`, `$`
  // and `.` (rewritten above) mean.
  const m = /^\(\?([a-z]*)(?:-([a-z]*))?:/.exec(s.slice(i, i + 12));
  if (!m || /[^i]/.test(`${m[1] ?? ''}${m[2] ?? ''}`))
    throw new Unsupported('a modifier group other than i');
  return [m[0], m[0].length];
}

function charClass(s: string, i: number): [string, number] {
  let j = i + 1;
  const negate = s[j] === '^';
  if (negate) j++;
  let body = '';
  while (s[j] !== ']') {
    const c = s[j]!;
    if (c === '\\') {
      const [text, length] = escape(s, j, true);
      body += text;
      j += length;
    } else {
      body += c === '[' ? '\\[' : c; // `[:` would open a POSIX class in RE2
      j++;
    }
  }
  const length = j + 1 - i;
  // `[]` matches nothing and `[^]` anything in ECMAScript; RE2 reads `[]…` differently.
  if (body === '') return [negate ? `[${ANY}]` : `[^${ANY}]`, length];
  return [`[${negate ? '^' : ''}${body}]`, length];
}

function escape(s: string, i: number, inClass: boolean): [string, number] {
  const c = s[i + 1]!;
  switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 't':
    case 'n':
    case 'f':
    case 'r':
      return [`\\${c}`, 2];
    case 'v':
      return [hex(0xb), 2];
    case 'b':
      return [inClass ? hex(8) : '\\b', 2];
    case 'B':
      return ['\\B', 2];
    case 's':
      return [inClass ? WS : `[${WS}]`, 2];
    case 'S':
      return [inClass ? NOT_WS : `[${NOT_WS}]`, 2];
    case '0':
      return [hex(0), 2];
    case 'c':
      return [hex(s.charCodeAt(i + 2) % 32), 3];
    case 'x':
      return [hex(parseInt(s.slice(i + 2, i + 4), 16)), 4];
    case 'u':
      return unicodeEscape(s, i);
    case 'p':
    case 'P':
      return property(s, i);
    case 'k':
      throw new Unsupported('backreference');
    default:
      if (c >= '1' && c <= '9') throw new Unsupported('backreference');
      // a syntax character, `/` or (in a class) `-`: RE2 takes any punctuation escaped
      return [`\\${c}`, 2];
  }
}

function unicodeEscape(s: string, i: number): [string, number] {
  if (s[i + 2] === '{') {
    const end = s.indexOf('}', i);
    return [hex(parseInt(s.slice(i + 3, end), 16)), end + 1 - i];
  }
  const code = parseInt(s.slice(i + 2, i + 6), 16);
  // With the `u` flag an escaped surrogate pair is one code point.
  if (code >= 0xd800 && code <= 0xdbff && s.startsWith('\\u', i + 6)) {
    const low = parseInt(s.slice(i + 8, i + 12), 16);
    if (/^[0-9a-fA-F]{4}$/.test(s.slice(i + 8, i + 12)) && low >= 0xdc00 && low <= 0xdfff)
      return [hex(0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00)), 12];
  }
  return [hex(code), 6];
}

function property(s: string, i: number): [string, number] {
  const end = s.indexOf('}', i);
  const body = s.slice(i + 3, end);
  const eq = body.indexOf('=');
  const key = eq < 0 ? undefined : body.slice(0, eq);
  const value = eq < 0 ? body : body.slice(eq + 1);
  let name: string;
  if (key === undefined || key === 'General_Category' || key === 'gc')
    name = CATEGORY[value] ?? value;
  else if (key === 'Script' || key === 'sc') name = value;
  else throw new Unsupported(`the property \\p{${body}}`);
  return [`\\${s[i + 1]}{${name}}`, end + 1 - i];
}
