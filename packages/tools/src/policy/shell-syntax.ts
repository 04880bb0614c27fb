/**
 * A small POSIX/bash command-line parser for the shell policy: just enough syntax to find every
 * simple command a line would run — across `;`, `&&`, `||`, `|`, newlines, subshells, groups,
 * `$(…)`, backticks, `<(…)`, here-documents and compound commands — with quotes removed the way
 * the shell removes them. It does not execute or expand anything; expansions it cannot know stay
 * marked as dynamic in the result.
 *
 * Every text it lexes (including the bodies of backticks and here-documents, which are lexed
 * again) and every level of nesting is charged to the check's Budget, so a hostile line costs
 * at most the budget, whatever its shape.
 */
import { Budget } from './budget.js';

export type WordPart =
  /** Literal text; `quoted` when it came from quotes or a backslash escape. */
  | { kind: 'lit'; text: string; quoted: boolean }
  /** `$NAME` / `${NAME}`. */
  | { kind: 'var'; name: string; quoted: boolean }
  /** `$(…)`, backticks, `<(…)`, `>(…)`: runs `commands`, output unknown. */
  | { kind: 'sub'; commands: SimpleCommand[]; quoted: boolean }
  /** Anything else whose value is unknown: `$1`, `$@`, `${x:-y}`, `$((…))`. */
  | { kind: 'dyn'; quoted: boolean };

export interface Word {
  parts: WordPart[];
}

export interface Redirect {
  /** `>`, `>>`, `>|`, `<`, `<>`, `<<`, `<<-`, `<<<`, `>&`, `<&`, `&>`, `&>>`. */
  op: string;
  target: Word | undefined;
  /** Commands inside an unquoted here-document (`$(…)` in its body). */
  heredocCommands: SimpleCommand[];
  /** The here-document's text, for `<<` and `<<-`. */
  heredocBody?: string;
}

export interface Assignment {
  name: string;
  value: Word;
}

export interface SimpleCommand {
  words: Word[];
  assignments: Assignment[];
  redirects: Redirect[];
  /** Reads its standard input from a pipe (not the first command of a pipeline). */
  piped: boolean;
}

export class ShellSyntaxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ShellSyntaxError';
  }
}

type Token =
  | { t: 'word'; word: Word }
  | { t: 'op'; op: string }
  | { t: 'redir'; redirect: Redirect }
  | { t: 'arith' };

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Parses a command line into its simple commands, nested ones first, in execution order. */
export function parseShell(source: string, budget: Budget = new Budget()): SimpleCommand[] {
  budget.step(source.length);
  const lexer = new Lexer(source, 0, budget);
  const tokens = lexer.lex('top');
  return parseTokens(tokens, budget);
}

class Lexer {
  private i: number;
  private tokens: Token[] = [];
  private parts: WordPart[] = [];
  private wordStarted = false;
  private parenDepth = 0;
  private pendingDelimiter: Redirect | undefined;
  private heredocs: { redirect: Redirect; delimiter: string; strip: boolean; quoted: boolean }[] =
    [];

  constructor(
    private readonly src: string,
    private readonly depth: number,
    private readonly budget: Budget,
    start = 0,
  ) {
    budget.nest(depth, 'command substitution');
    this.i = start;
  }

  get position(): number {
    return this.i;
  }

  /** Lexes to the end (`top`) or to the `)` closing a `$(` (`paren`). */
  lex(mode: 'top' | 'paren'): Token[] {
    const s = this.src;
    while (this.i < s.length) {
      const c = s[this.i]!;
      if (c === ' ' || c === '\t' || c === '\r') {
        this.flush();
        this.i++;
      } else if (c === '\\' && s[this.i + 1] === '\n') {
        this.i += 2; // line continuation
      } else if (c === '\n') {
        this.flush();
        this.tokens.push({ t: 'op', op: '\n' });
        this.i++;
        this.readHeredocBodies();
      } else if (c === '#' && !this.wordStarted) {
        while (this.i < s.length && s[this.i] !== '\n') this.i++;
      } else if (c === ')' && mode === 'paren' && this.parenDepth === 0) {
        this.flush();
        this.i++;
        return this.tokens;
      } else if (c === ';' || c === '&' || c === '|' || c === '(' || c === ')') {
        if (c === '&' && s[this.i + 1] === '>') {
          this.flush();
          const op = s[this.i + 2] === '>' ? '&>>' : '&>';
          this.i += op.length;
          this.redirect(op);
        } else {
          this.operator(c);
        }
      } else if ((c === '<' || c === '>') && s[this.i + 1] === '(') {
        // Process substitution: a word part that runs commands.
        this.i += 2;
        this.wordStarted = true;
        this.parts.push({ kind: 'sub', commands: this.nested(), quoted: false });
      } else if (c === '<' || c === '>') {
        this.redirectOperator();
      } else {
        this.wordChar();
      }
    }
    if (mode === 'paren') throw new ShellSyntaxError('unterminated $(…)');
    this.flush();
    if (this.heredocs.length > 0) this.readHeredocBodies();
    return this.tokens;
  }

  private operator(c: string): void {
    const s = this.src;
    this.flush();
    let op = c;
    const next = s[this.i + 1];
    if (c === ';' && next === ';') op = s[this.i + 2] === '&' ? ';;&' : ';;';
    else if (c === ';' && next === '&') op = ';&';
    else if (c === '&' && next === '&') op = '&&';
    else if (c === '|' && next === '|') op = '||';
    else if (c === '|' && next === '&') op = '|&';
    if (c === '(' && next === '(' && this.atCommandStart()) {
      // (( arithmetic )): no commands inside.
      this.i = this.skipBalanced(this.i + 2, '((', '))');
      this.tokens.push({ t: 'arith' });
      return;
    }
    if (c === '(') this.budget.nest(this.depth + ++this.parenDepth, 'subshell');
    if (c === ')') this.parenDepth = Math.max(0, this.parenDepth - 1);
    this.i += op.length;
    this.tokens.push({ t: 'op', op });
  }

  private atCommandStart(): boolean {
    const last = this.tokens.at(-1);
    return last === undefined || last.t === 'op';
  }

  private redirectOperator(): void {
    const s = this.src;
    // A word of digits right before < or > is a file descriptor number, not an argument.
    const fd =
      this.parts.length > 0 &&
      this.parts.every((p) => p.kind === 'lit' && !p.quoted && /^\d+$/.test(p.text));
    if (fd) {
      this.parts = [];
      this.wordStarted = false;
    } else {
      this.flush();
    }
    const three = s.slice(this.i, this.i + 3);
    const two = s.slice(this.i, this.i + 2);
    let op: string;
    if (three === '<<<' || three === '<<-') op = three;
    else if (['<<', '<>', '<&', '>>', '>|', '>&'].includes(two)) op = two;
    else op = s[this.i]!;
    this.i += op.length;
    this.redirect(op);
  }

  private redirect(op: string): void {
    const redirect: Redirect = { op, target: undefined, heredocCommands: [] };
    this.tokens.push({ t: 'redir', redirect });
    if (op === '<<' || op === '<<-') this.pendingDelimiter = redirect;
  }

  private flush(): void {
    if (!this.wordStarted) return;
    const word: Word = { parts: this.parts };
    this.parts = [];
    this.wordStarted = false;
    if (this.pendingDelimiter) {
      const redirect = this.pendingDelimiter;
      this.pendingDelimiter = undefined;
      const delimiter = word.parts.map((p) => (p.kind === 'lit' ? p.text : '')).join('');
      const quoted = word.parts.some((p) => p.quoted);
      this.heredocs.push({ redirect, delimiter, strip: redirect.op === '<<-', quoted });
    }
    this.tokens.push({ t: 'word', word });
  }

  /** Reads the here-document bodies that start after a newline. */
  private readHeredocBodies(): void {
    const s = this.src;
    for (const doc of this.heredocs) {
      let body = '';
      while (this.i < s.length) {
        const end = s.indexOf('\n', this.i);
        const line = s.slice(this.i, end === -1 ? s.length : end);
        this.i = end === -1 ? s.length : end + 1;
        if ((doc.strip ? line.replace(/^\t+/, '') : line) === doc.delimiter) break;
        body += `${line}\n`;
      }
      doc.redirect.heredocBody = body;
      if (!doc.quoted) {
        // Unquoted here-documents expand $(…) and backticks: those commands run.
        this.budget.step(body.length);
        const inner = new Lexer(body, this.depth + 1, this.budget);
        for (const part of inner.doubleQuoted(undefined)) {
          if (part.kind === 'sub') pushAll(doc.redirect.heredocCommands, part.commands);
        }
      }
    }
    this.heredocs = [];
  }

  private nested(): SimpleCommand[] {
    const inner = new Lexer(this.src, this.depth + 1, this.budget, this.i);
    const tokens = inner.lex('paren');
    this.i = inner.position;
    return parseTokens(tokens, this.budget);
  }

  private skipBalanced(from: number, open: string, close: string): number {
    let depth = 1;
    let i = from;
    while (i < this.src.length) {
      if (this.src.startsWith(close, i)) {
        depth--;
        i += close.length;
        if (depth === 0) return i;
      } else if (this.src.startsWith(open, i)) {
        depth++;
        this.budget.nest(this.depth + depth, open === '{' ? '${…}' : 'arithmetic');
        i += open.length;
      } else {
        i++;
      }
    }
    throw new ShellSyntaxError(`unterminated ${open}`);
  }

  private lit(text: string, quoted: boolean): void {
    this.wordStarted = true;
    const last = this.parts.at(-1);
    if (last?.kind === 'lit' && last.quoted === quoted) last.text += text;
    else this.parts.push({ kind: 'lit', text, quoted });
  }

  /** One unit of a word outside double quotes. */
  private wordChar(): void {
    const s = this.src;
    const c = s[this.i]!;
    if (c === "'") {
      const end = s.indexOf("'", this.i + 1);
      if (end === -1) throw new ShellSyntaxError('unterminated single quote');
      this.lit(s.slice(this.i + 1, end), true);
      this.i = end + 1;
    } else if (c === '"') {
      this.i++;
      this.wordStarted = true;
      pushAll(this.parts, this.doubleQuoted('"'));
    } else if (c === '\\') {
      if (this.i + 1 < s.length) this.lit(s[this.i + 1]!, true);
      this.i += 2;
    } else if (c === '`') {
      this.wordStarted = true;
      this.parts.push({ kind: 'sub', commands: this.backticks(), quoted: false });
    } else if (c === '$') {
      this.dollar(false);
    } else {
      this.lit(c, false);
      this.i++;
    }
  }

  /**
   * The inside of "…" (terminator `"`) or of an unquoted here-document body (terminator
   * undefined: to the end). Returns its parts, all quoted.
   */
  doubleQuoted(terminator: '"' | undefined): WordPart[] {
    const s = this.src;
    const saved = this.parts;
    this.parts = [];
    let closed = terminator === undefined;
    while (this.i < s.length) {
      const c = s[this.i]!;
      if (terminator && c === terminator) {
        this.i++;
        closed = true;
        break;
      }
      if (c === '\\' && this.i + 1 < s.length) {
        const n = s[this.i + 1]!;
        if (n === '\n') {
          this.i += 2;
        } else if ('$`"\\'.includes(n)) {
          this.lit(n, true);
          this.i += 2;
        } else {
          this.lit('\\', true);
          this.i++;
        }
      } else if (c === '`') {
        this.parts.push({ kind: 'sub', commands: this.backticks(), quoted: true });
      } else if (c === '$') {
        this.dollar(true);
      } else {
        this.lit(c, true);
        this.i++;
      }
    }
    if (!closed) throw new ShellSyntaxError('unterminated double quote');
    const parts = this.parts;
    this.parts = saved;
    if (parts.length === 0) parts.push({ kind: 'lit', text: '', quoted: true });
    return parts;
  }

  private backticks(): SimpleCommand[] {
    const s = this.src;
    let i = this.i + 1;
    let body = '';
    while (i < s.length && s[i] !== '`') {
      if (s[i] === '\\' && i + 1 < s.length && '`$\\'.includes(s[i + 1]!)) {
        body += s[i + 1];
        i += 2;
      } else {
        body += s[i];
        i++;
      }
    }
    if (i >= s.length) throw new ShellSyntaxError('unterminated backquote');
    this.i = i + 1;
    this.budget.step(body.length);
    const inner = new Lexer(body, this.depth + 1, this.budget);
    return parseTokens(inner.lex('top'), this.budget);
  }

  private dollar(quoted: boolean): void {
    const s = this.src;
    const n = s[this.i + 1];
    this.wordStarted = true;
    if (n === '(' && s[this.i + 2] === '(') {
      this.i = this.skipBalanced(this.i + 3, '((', '))');
      this.parts.push({ kind: 'dyn', quoted });
    } else if (n === '(') {
      this.i += 2;
      this.parts.push({ kind: 'sub', commands: this.nested(), quoted });
    } else if (n === '{') {
      const end = this.skipBalanced(this.i + 2, '{', '}');
      const inside = s.slice(this.i + 2, end - 1);
      this.i = end;
      if (NAME.test(inside)) this.parts.push({ kind: 'var', name: inside, quoted });
      else this.parts.push({ kind: 'dyn', quoted });
    } else if (n === "'" && !quoted) {
      const { text, end } = ansiC(s, this.i + 2);
      this.lit(text, true);
      this.i = end;
    } else if (n === '"' && !quoted) {
      this.i += 2;
      pushAll(this.parts, this.doubleQuoted('"'));
    } else if (n !== undefined && /[A-Za-z_]/.test(n)) {
      let j = this.i + 1;
      while (j < s.length && /[A-Za-z0-9_]/.test(s[j]!)) j++;
      this.parts.push({ kind: 'var', name: s.slice(this.i + 1, j), quoted });
      this.i = j;
    } else if (n !== undefined && /[0-9@*#?$!-]/.test(n)) {
      this.parts.push({ kind: 'dyn', quoted });
      this.i += 2;
    } else {
      this.lit('$', quoted);
      this.i++;
    }
  }
}

/** Decodes a $'…' string starting after the opening quote. */
function ansiC(s: string, start: number): { text: string; end: number } {
  const simple: Record<string, string> = {
    n: '\n',
    t: '\t',
    r: '\r',
    a: '\x07',
    b: '\b',
    e: '\x1b',
    E: '\x1b',
    f: '\f',
    v: '\v',
    '\\': '\\',
    "'": "'",
    '"': '"',
    '?': '?',
  };
  let text = '';
  let i = start;
  while (i < s.length && s[i] !== "'") {
    if (s[i] !== '\\' || i + 1 >= s.length) {
      text += s[i];
      i++;
      continue;
    }
    const n = s[i + 1]!;
    let m: RegExpExecArray | null;
    if (simple[n] !== undefined) {
      text += simple[n];
      i += 2;
    } else if ((m = /^x([0-9a-fA-F]{1,2})/.exec(s.slice(i + 1)))) {
      text += String.fromCharCode(parseInt(m[1]!, 16));
      i += 1 + m[0].length;
    } else if ((m = /^u([0-9a-fA-F]{1,4})/.exec(s.slice(i + 1)))) {
      text += String.fromCharCode(parseInt(m[1]!, 16));
      i += 1 + m[0].length;
    } else if ((m = /^U([0-9a-fA-F]{1,8})/.exec(s.slice(i + 1)))) {
      text += String.fromCodePoint(Math.min(parseInt(m[1]!, 16), 0x10ffff));
      i += 1 + m[0].length;
    } else if ((m = /^[0-7]{1,3}/.exec(s.slice(i + 1)))) {
      text += String.fromCharCode(parseInt(m[0], 8) & 0xff);
      i += 1 + m[0].length;
    } else {
      text += `\\${n}`;
      i += 2;
    }
  }
  if (i >= s.length) throw new ShellSyntaxError("unterminated $'…' string");
  return { text, end: i + 1 };
}

/** The literal text of a word if it has no expansions and no quotes, else undefined. */
export function plainText(word: Word): string | undefined {
  let text = '';
  for (const p of word.parts) {
    if (p.kind !== 'lit' || p.quoted) return undefined;
    text += p.text;
  }
  return text;
}

const SKIP_KEYWORDS = new Set([
  'if',
  'then',
  'else',
  'elif',
  'fi',
  'do',
  'done',
  'while',
  'until',
  '!',
  '{',
  '}',
  'coproc',
]);

function emptyCommand(piped: boolean): SimpleCommand {
  return { words: [], assignments: [], redirects: [], piped };
}

/** `to.push(...from)` without spreading: a long line can hold more items than a call's arguments. */
function pushAll<T>(to: T[], from: readonly T[]): void {
  for (const item of from) to.push(item);
}

/** Commands nested in a word's command substitutions. */
function wordCommands(word: Word | undefined): SimpleCommand[] {
  if (!word) return [];
  return word.parts.flatMap((p) => (p.kind === 'sub' ? p.commands : []));
}

function parseTokens(tokens: Token[], budget: Budget): SimpleCommand[] {
  const out: SimpleCommand[] = [];
  let cur = emptyCommand(false);
  /** Words that are data, not a command (for/case headers, [[ ]]): only their substitutions run. */
  let skipUntil: 'separator' | 'in' | ']]' | undefined;
  const cases: ('pattern' | 'body')[] = [];
  let skipNextWord = false;

  const finish = (piped: boolean) => {
    for (const a of cur.assignments) pushAll(out, wordCommands(a.value));
    for (const w of cur.words) pushAll(out, wordCommands(w));
    for (const r of cur.redirects) {
      pushAll(out, wordCommands(r.target));
      pushAll(out, r.heredocCommands);
    }
    if (cur.words.length > 0 || cur.assignments.length > 0) {
      budget.command();
      out.push(cur);
    }
    cur = emptyCommand(piped);
  };

  for (let k = 0; k < tokens.length; k++) {
    const tok = tokens[k]!;
    if (tok.t === 'arith') continue;
    if (tok.t === 'op') {
      if (skipUntil === 'separator' && (tok.op === ';' || tok.op === '\n')) skipUntil = undefined;
      if (tok.op === ')' && cases.at(-1) === 'pattern') {
        cases[cases.length - 1] = 'body';
        cur = emptyCommand(false);
        continue;
      }
      if (tok.op === '(' && cases.at(-1) === 'pattern') continue; // optional ( before a pattern
      if (
        tok.op === '(' &&
        cur.words.length === 1 &&
        cur.assignments.length === 0 &&
        tokens[k + 1]?.t === 'op' &&
        (tokens[k + 1] as { op: string }).op === ')'
      ) {
        // name() { … }: a function definition; its body is parsed as ordinary commands.
        pushAll(out, wordCommands(cur.words[0]));
        cur = emptyCommand(false);
        k++;
        continue;
      }
      if (tok.op === ';;' || tok.op === ';&' || tok.op === ';;&') {
        finish(false);
        if (cases.length > 0) cases[cases.length - 1] = 'pattern';
        continue;
      }
      finish(tok.op === '|' || tok.op === '|&');
      continue;
    }
    if (tok.t === 'redir') {
      const next = tokens[k + 1];
      if (next?.t === 'word') {
        tok.redirect.target = next.word;
        k++;
      }
      cur.redirects.push(tok.redirect);
      continue;
    }
    const word = tok.word;
    const text = plainText(word);
    if (cases.at(-1) === 'pattern') {
      pushAll(out, wordCommands(word));
      if (text === 'esac' && cur.words.length === 0) cases.pop();
      continue;
    }
    if (skipNextWord) {
      skipNextWord = false;
      pushAll(out, wordCommands(word));
      continue;
    }
    if (skipUntil) {
      pushAll(out, wordCommands(word));
      if (skipUntil === 'in' && text === 'in') {
        skipUntil = undefined;
        cases.push('pattern');
      } else if (skipUntil === ']]' && text === ']]') {
        skipUntil = undefined;
      } else if (skipUntil === 'separator' && text === 'do') {
        skipUntil = undefined;
      }
      continue;
    }
    if (cur.words.length === 0) {
      const eq = assignmentName(word);
      if (eq) {
        cur.assignments.push(eq);
        continue;
      }
      if (text !== undefined && cur.assignments.length === 0 && cur.redirects.length === 0) {
        if (SKIP_KEYWORDS.has(text)) continue;
        if (text === 'esac') {
          cases.pop();
          continue;
        }
        if (text === 'for' || text === 'select') {
          skipUntil = 'separator';
          continue;
        }
        if (text === 'case') {
          skipUntil = 'in';
          continue;
        }
        if (text === '[[') {
          skipUntil = ']]';
          continue;
        }
        if (text === 'function') {
          skipNextWord = true;
          continue;
        }
      }
    }
    cur.words.push(word);
  }
  finish(false);
  if (cases.length > 0 && cases.at(-1) === 'pattern' && cur.words.length > 0) {
    throw new ShellSyntaxError('unterminated case');
  }
  return out;
}

/** `NAME=value` (NAME unquoted) → the assignment; anything else → undefined. */
function assignmentName(word: Word): Assignment | undefined {
  const first = word.parts[0];
  if (!first || first.kind !== 'lit' || first.quoted) return undefined;
  const m = /^([A-Za-z_][A-Za-z0-9_]*)(\+?)=/.exec(first.text);
  if (!m) return undefined;
  const rest = first.text.slice(m[0].length);
  const valueParts: WordPart[] = [
    ...(rest ? [{ kind: 'lit' as const, text: rest, quoted: false }] : []),
    ...word.parts.slice(1),
  ];
  return { name: m[1]!, value: { parts: valueParts } };
}
