/**
 * A small POSIX/bash command-line parser for the shell policy: just enough syntax to find every
 * simple command a line would run — across `;`, `&&`, `||`, `|`, newlines, subshells, groups,
 * `$(…)`, backticks, `<(…)`, here-documents and compound commands, and inside the operands of
 * `${…}` (`${x:-$(…)}`, `${x/p/$(…)}`, subscripts), arithmetic (`$((…))`, `$[…]`, `((…))`,
 * `for ((…))`, the operands of `[[ -eq ]]`) and array assignments `a=(…)` — with quotes removed
 * the way the shell removes them. It does not execute or expand anything; expansions it cannot
 * know stay marked as dynamic in the result, and the variables whose *values* bash evaluates as
 * code (arithmetic on a name, `${!x}`, `${x@P}`) are reported as Evaluations for the policy.
 *
 * Every text it lexes (including the bodies of backticks and here-documents, which are lexed
 * again) and every level of nesting is charged to the check's Budget, so a hostile line costs
 * at most the budget, whatever its shape.
 */
import { Budget } from './budget.js';

/**
 * A variable whose value bash evaluates, not just substitutes: as an arithmetic expression (a
 * name in `$((…))`; its value's subscripts run `$(…)`: `x='a[$(id)]'; echo $((x))`), as a name
 * (`${!x}`, same subscripts), as a prompt string (`${x@P}` runs the `$(…)` in it), or assigned by
 * an expansion (`${x:=…}`).
 */
export interface Evaluation {
  name: string;
  as: 'arith' | 'indirect' | 'prompt' | 'assign';
}

/**
 * What parsing noticed about the line as a whole, shared by every parse of one check. A quoted
 * string holding `$(`, `${`, `$[` or a backtick is code text the line could hand to bash at run
 * time (`read x <<< 'a[$(cmd)]'; echo $((x))`), though no expansion shows it.
 */
export interface ParseNotes {
  quotedCode: boolean;
}

/** `$(`, `${`, `$[`, a backtick, or a `$` spelled as an escape printf or echo -e decode. */
const CODE_TEXT = /\$[({[]|`|\\(?:0?44|x24|u0024|U00000024)/;

/** What a piece of text runs: its commands (nested first) and the values it evaluates. */
export interface Code {
  commands: SimpleCommand[];
  evaluates: Evaluation[];
}

export type WordPart =
  /** Literal text; `quoted` when it came from quotes or a backslash escape. */
  | { kind: 'lit'; text: string; quoted: boolean }
  /** `$NAME` / `${NAME}`. */
  | { kind: 'var'; name: string; quoted: boolean }
  /** `$(…)`, backticks, `<(…)`, `>(…)` (`process`): runs `commands`, output unknown. */
  | { kind: 'sub'; commands: SimpleCommand[]; quoted: boolean; process?: boolean }
  /**
   * Anything else whose value is unknown: `$1`, `$@`, `${x:-…}`, `$((…))`, `a=(…)`, with the
   * commands its operands run and the values it evaluates.
   */
  | {
      kind: 'dyn';
      quoted: boolean;
      commands: SimpleCommand[];
      evaluates: Evaluation[];
      /** `a=( … )`: the element words (bash evaluates an element used in arithmetic). */
      elements?: Word[];
      /** Its value is a number (`$$`, `$?`, `${#x}`, `$((…))`): it cannot carry code. */
      numeric?: boolean;
    };

export interface Word {
  parts: WordPart[];
}

export interface Redirect {
  /** `>`, `>>`, `>|`, `<`, `<>`, `<<`, `<<-`, `<<<`, `>&`, `<&`, `&>`, `&>>`. */
  op: string;
  target: Word | undefined;
  /** An unquoted here-document's body as a word: its `$(…)` run, its `$((…))` evaluate. */
  heredocWord?: Word;
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
  /** Values evaluated by the command itself: `(( x ))`, `for ((…))`, `[[ $x -eq 1 ]]`. */
  evaluates: Evaluation[];
  /**
   * `for NAME in WORDS` / `select NAME in WORDS`: NAME takes each value in turn (`values`
   * undefined: `for NAME; do`, the positional parameters).
   */
  loop?: { name: string; values: Word[] | undefined };
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
  | { t: 'arith'; code: Code };

/** Keywords after which a command (or `for`'s `((`) starts. */
const COMMAND_KEYWORDS = new Set([
  'for',
  'if',
  'then',
  'else',
  'elif',
  'do',
  'while',
  'until',
  '!',
  '{',
  'time',
  'coproc',
]);

/** Tests of `[[ … ]]` whose operands bash evaluates as arithmetic. */
const ARITH_TESTS = new Set(['-eq', '-ne', '-lt', '-le', '-gt', '-ge']);

/** Parses a command line into its simple commands, nested ones first, in execution order. */
export function parseShell(
  source: string,
  budget: Budget = new Budget(),
  depth = 0,
  notes: ParseNotes = { quotedCode: false },
): SimpleCommand[] {
  budget.step(source.length);
  const lexer = new Lexer(source, depth, budget, notes);
  const tokens = lexer.lex('top');
  return parseTokens(tokens, budget, depth);
}

/**
 * What evaluating `text` as an arithmetic expression runs: the value of a variable used in
 * arithmetic, a `[[ -eq ]]` operand, a subscript. Quotes do not hide `$(…)` here: bash expands
 * a subscript again when it evaluates it.
 */
export function parseArithmetic(
  text: string,
  budget: Budget,
  depth: number,
  notes: ParseNotes = { quotedCode: false },
): Code {
  budget.step(text.length);
  const lexer = new Lexer(text, depth, budget, notes);
  const code = lexer.arith((s, i) => (i >= s.length ? 0 : -1), 'arithmetic');
  if (!code) throw new ShellSyntaxError('unbalanced ) in arithmetic');
  return code;
}

/** What expanding `text` the way a prompt (`PS4`, `${x@P}`) or a here-document is expanded runs. */
export function parsePromptText(
  text: string,
  budget: Budget,
  depth: number,
  notes: ParseNotes = { quotedCode: false },
): Code {
  budget.step(text.length);
  const lexer = new Lexer(text, depth, budget, notes);
  const code = emptyCode();
  collectCode(lexer.doubleQuoted(undefined), code);
  return code;
}

class Lexer {
  private i: number;
  private tokens: Token[] = [];
  private parts: WordPart[] = [];
  private wordStarted = false;
  private parenDepth = 0;
  /** `${…}` and arithmetic open inside this lexer (each can hold the other and `$(…)`). */
  private inner = 0;
  /** `case … esac` open: a `)` ends a pattern, not the `$(…)` around it. */
  private cases = 0;
  private pendingDelimiter: Redirect | undefined;
  private heredocs: { redirect: Redirect; delimiter: string; strip: boolean; quoted: boolean }[] =
    [];

  constructor(
    private readonly src: string,
    private readonly depth: number,
    private readonly budget: Budget,
    private readonly notes: ParseNotes,
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
      } else if (c === ')' && mode === 'paren' && this.parenDepth === 0 && this.closes()) {
        this.flush();
        this.i++;
        return this.tokens;
      } else if (c === '(' && this.atArrayAssignment()) {
        // a=( … ): the elements are words (their substitutions run), not a subshell.
        this.i++;
        const inner = new Lexer(this.src, this.depth + 1, this.budget, this.notes, this.i);
        const tokens = inner.lex('paren');
        this.i = inner.position;
        const code = emptyCode();
        const elements: Word[] = [];
        for (const t of tokens) {
          if (t.t !== 'word') continue;
          collectCode(t.word.parts, code);
          elements.push(t.word);
        }
        this.parts.push({ kind: 'dyn', quoted: false, ...code, elements });
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
        this.parts.push({ kind: 'sub', commands: this.nested(), quoted: false, process: true });
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
      // (( arithmetic )), for (( … )): its $(…) run and its names are evaluated. When the
      // parentheses do not close as `))` it is two subshells, as bash reads it.
      const start = this.i;
      this.i += 2;
      const code = this.arith(closer('))'), '((…))');
      if (code) {
        this.tokens.push({ t: 'arith', code });
        return;
      }
      this.i = start;
    }
    if (c === '(') this.budget.nest(this.depth + ++this.parenDepth, 'subshell');
    if (c === ')') this.parenDepth = Math.max(0, this.parenDepth - 1);
    this.i += op.length;
    this.tokens.push({ t: 'op', op });
  }

  private atCommandStart(): boolean {
    const last = this.tokens.at(-1);
    // After a keyword a command starts: `if (( x ))`, `while (( x ))`, `for (( … ))`.
    if (last?.t === 'word') return COMMAND_KEYWORDS.has(plainText(last.word) ?? '');
    return last === undefined || last.t === 'op';
  }

  /** A `)` here closes the `$(…)`, unless it ends a case pattern (`esac` ends the word first). */
  private closes(): boolean {
    this.flush();
    return this.cases === 0;
  }

  /** The word so far is `NAME=` or `NAME+=`: a `(` starts an array's elements. */
  private atArrayAssignment(): boolean {
    const only = this.parts.length === 1 ? this.parts[0] : undefined;
    return only?.kind === 'lit' && !only.quoted && /^[A-Za-z_][A-Za-z0-9_]*\+?=$/.test(only.text);
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
    const redirect: Redirect = { op, target: undefined };
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
    const last = this.tokens.at(-1);
    const text = plainText(word);
    if (text === 'case' && (last === undefined || last.t === 'op')) this.cases++;
    else if (text === 'esac' && this.cases > 0) this.cases--;
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
      if (doc.quoted && CODE_TEXT.test(body)) this.notes.quotedCode = true;
      if (!doc.quoted) {
        // Unquoted here-documents expand $(…), backticks, ${…} and $((…)): those run.
        this.budget.step(body.length);
        const inner = new Lexer(body, this.depth + 1, this.budget, this.notes);
        doc.redirect.heredocWord = { parts: inner.doubleQuoted(undefined) };
      }
    }
    this.heredocs = [];
  }

  private nested(): SimpleCommand[] {
    const inner = new Lexer(this.src, this.depth + 1, this.budget, this.notes, this.i);
    const tokens = inner.lex('paren');
    this.i = inner.position;
    return parseTokens(tokens, this.budget, this.depth + 1);
  }

  /** Counts one more `${…}` or arithmetic level against the budget's depth. */
  private enter(what: string): void {
    this.inner++;
    this.budget.nest(this.depth + this.parenDepth + this.inner, what);
  }

  /** The parts `fn` produces, kept apart from the word being built. */
  private capture(fn: () => void): WordPart[] {
    const saved = this.parts;
    const started = this.wordStarted;
    this.parts = [];
    try {
      fn();
      return this.parts;
    } finally {
      this.parts = saved;
      this.wordStarted = started;
    }
  }

  /**
   * An arithmetic expression from the current position to its closer (`end` gives the closer's
   * length at a position, or -1). Every `$…` and backtick in it is parsed — quotes do not hide
   * them, since bash expands subscripts again — and every bare name is reported as evaluated.
   * undefined when a `)` closes more than was opened (`$((ls) | wc)` is a command substitution).
   */
  arith(end: (s: string, i: number) => number, what: string): Code | undefined {
    const s = this.src;
    const code = emptyCode();
    const start = this.i;
    let parens = 0;
    let brackets = 0;
    this.enter(what);
    for (;;) {
      if (parens === 0 && brackets === 0) {
        const n = end(s, this.i);
        if (n >= 0) {
          this.i += n;
          this.inner--;
          this.budget.step(this.i - start);
          return code;
        }
      }
      if (this.i >= s.length) throw new ShellSyntaxError(`unterminated ${what}`);
      const c = s[this.i]!;
      if (c === '$') {
        collectCode(
          this.capture(() => this.dollar(true)),
          code,
          'arith',
        );
      } else if (c === '`') {
        pushAll(code.commands, this.backticks());
      } else if (c === '\\') {
        this.i += 2;
      } else if (c === '(') {
        parens++;
        this.budget.nest(this.depth + this.parenDepth + this.inner + parens, what);
        this.i++;
      } else if (c === ')') {
        if (parens === 0) {
          // Charged too: the caller reads the same text again as commands, and nested
          // failures would otherwise double the work at each level.
          this.inner--;
          this.budget.step(this.i - start);
          return undefined;
        }
        parens--;
        this.i++;
      } else if (c === '[') {
        brackets++;
        this.i++;
      } else if (c === ']' && brackets > 0) {
        brackets--;
        this.i++;
      } else if (/[0-9]/.test(c)) {
        // A number, in any base (0x1f, 16#ff, 64#_@): not a name.
        while (this.i < s.length && /[0-9A-Za-z_#@]/.test(s[this.i]!)) this.i++;
      } else if (/[A-Za-z_]/.test(c)) {
        let j = this.i + 1;
        while (j < s.length && /[A-Za-z0-9_]/.test(s[j]!)) j++;
        code.evaluates.push({ name: s.slice(this.i, j), as: 'arith' });
        this.i = j;
      } else {
        this.i++;
      }
    }
  }

  /**
   * `${…}` from the `$`: the parameter, its subscript (arithmetic), and the operand of its
   * operator (`:-`, `=`, `/`, `#`, `:offset:length`, …), where `$(…)`, backticks and more
   * `${…}` run.
   */
  private braceParam(quoted: boolean): WordPart {
    const s = this.src;
    this.i += 2;
    this.enter('${…}');
    const code = emptyCode();
    let prefix = '';
    if ((s[this.i] === '#' || s[this.i] === '!') && s[this.i + 1] !== '}') prefix = s[this.i++]!;
    let name: string;
    const m = /^(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!0-])/.exec(s.slice(this.i, this.i + 256));
    if (m) {
      name = m[0];
      this.i += name.length;
    } else if (prefix) {
      name = prefix; // ${#} and ${!}: the special parameters themselves
      prefix = '';
    } else {
      throw new ShellSyntaxError('bad substitution');
    }
    let subscript = false;
    if (s[this.i] === '[') {
      this.i++;
      const sub = this.arith(closer(']'), 'subscript');
      if (!sub) throw new ShellSyntaxError('bad subscript');
      mergeCode(code, sub);
      subscript = true;
    }
    if (prefix === '!' && /^[*@]\}/.test(s.slice(this.i, this.i + 2))) {
      // ${!prefix*}: the names of the variables starting with prefix.
      this.i += 2;
      this.inner--;
      return { kind: 'dyn', quoted, ...code };
    }
    const simple = !prefix && !subscript && /^[A-Za-z_]/.test(name);
    if (s[this.i] === '}') {
      this.i++;
      this.inner--;
      if (simple) return { kind: 'var', name, quoted };
      if (prefix === '!' && !subscript && /^[A-Za-z_]/.test(name)) {
        code.evaluates.push({ name, as: 'indirect' });
      }
      // ${#x}, ${#a[@]}, ${$}, ${?}, ${#}, ${!}: lengths, counts and ids.
      const numeric = prefix === '#' || (!prefix && /^[$?#!]$/.test(name));
      return { kind: 'dyn', quoted, ...code, ...(numeric ? { numeric } : {}) };
    }
    if (prefix === '!' && /^[A-Za-z_]/.test(name)) {
      code.evaluates.push({ name, as: 'indirect' });
    }
    const op = /^(?::[-=?+]|[-=?+]|##?|%%?|\/[/#%]?|\^\^?|,,?|@[A-Za-z]|:)/.exec(
      s.slice(this.i, this.i + 2),
    );
    if (!op) throw new ShellSyntaxError('bad substitution');
    this.i += op[0].length;
    if (op[0] === '@P' && /^[A-Za-z_]/.test(name)) code.evaluates.push({ name, as: 'prompt' });
    if ((op[0] === '=' || op[0] === ':=') && /^[A-Za-z_]/.test(name)) {
      code.evaluates.push({ name, as: 'assign' });
    }
    if (op[0] === ':') {
      // ${x:offset:length}: both are arithmetic.
      const offset = this.arith(closer(':', '}'), '${…:offset}');
      if (!offset) throw new ShellSyntaxError('bad substitution');
      mergeCode(code, offset);
      if (s[this.i - 1] === ':') {
        const length = this.arith(closer('}'), '${…:length}');
        if (!length) throw new ShellSyntaxError('bad substitution');
        mergeCode(code, length);
      }
      this.inner--;
      return { kind: 'dyn', quoted, ...code };
    }
    collectCode(
      this.capture(() => this.operand(quoted)),
      code,
    );
    this.inner--;
    return { kind: 'dyn', quoted, ...code };
  }

  /** The operand of a `${…}` operator, up to and past its closing `}`. */
  private operand(quoted: boolean): void {
    const s = this.src;
    let braces = 0;
    while (this.i < s.length) {
      const c = s[this.i]!;
      if (c === '}' && braces === 0) {
        this.i++;
        return;
      }
      if (c === '{') braces++;
      if (c === '}') braces--;
      if (c === "'" && !quoted) {
        const end = s.indexOf("'", this.i + 1);
        if (end === -1) throw new ShellSyntaxError('unterminated single quote');
        this.lit(s.slice(this.i + 1, end), true);
        this.i = end + 1;
      } else if (c === '"') {
        this.i++;
        pushAll(this.parts, this.doubleQuoted('"'));
      } else if (c === '\\') {
        if (this.i + 1 < s.length) this.lit(s[this.i + 1]!, true);
        this.i += 2;
      } else if (c === '`') {
        this.parts.push({ kind: 'sub', commands: this.backticks(), quoted });
      } else if (c === '$') {
        this.dollar(quoted);
      } else {
        this.lit(c, quoted);
        this.i++;
      }
    }
    throw new ShellSyntaxError('unterminated ${…}');
  }

  private lit(text: string, quoted: boolean): void {
    this.wordStarted = true;
    const last = this.parts.at(-1);
    let part: WordPart & { kind: 'lit' };
    if (last?.kind === 'lit' && last.quoted === quoted) {
      last.text += text;
      part = last;
    } else {
      part = { kind: 'lit', text, quoted };
      this.parts.push(part);
    }
    // The new text and the character before it: `$` and `(` may arrive one call apart.
    if (quoted && CODE_TEXT.test(part.text.slice(-text.length - 1))) this.notes.quotedCode = true;
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
    const inner = new Lexer(body, this.depth + 1, this.budget, this.notes);
    return parseTokens(inner.lex('top'), this.budget, this.depth + 1);
  }

  private dollar(quoted: boolean): void {
    const s = this.src;
    const n = s[this.i + 1];
    this.wordStarted = true;
    if (n === '(' && s[this.i + 2] === '(') {
      const start = this.i;
      this.i += 3;
      const code = this.arith(closer('))'), '$((…))');
      if (code) {
        this.parts.push({ kind: 'dyn', quoted, ...code, numeric: true });
      } else {
        // $( (…) …): a command substitution starting with a subshell, as bash reads it.
        this.i = start + 2;
        this.parts.push({ kind: 'sub', commands: this.nested(), quoted });
      }
    } else if (n === '(') {
      this.i += 2;
      this.parts.push({ kind: 'sub', commands: this.nested(), quoted });
    } else if (n === '[') {
      // $[ … ]: the old spelling of $(( … )).
      this.i += 2;
      const code = this.arith(closer(']'), '$[…]');
      if (!code) throw new ShellSyntaxError('unbalanced ) in $[…]');
      this.parts.push({ kind: 'dyn', quoted, ...code, numeric: true });
    } else if (n === '{') {
      this.parts.push(this.braceParam(quoted));
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
      const numeric = /[#?$!]/.test(n);
      this.parts.push({ kind: 'dyn', quoted, ...emptyCode(), ...(numeric ? { numeric } : {}) });
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
  return { words: [], assignments: [], redirects: [], piped, evaluates: [] };
}

function emptyCode(): Code {
  return { commands: [], evaluates: [] };
}

function mergeCode(into: Code, from: Code): void {
  pushAll(into.commands, from.commands);
  pushAll(into.evaluates, from.evaluates);
}

/**
 * Adds what `parts` run to `code`. In arithmetic (`context`), a `$x` is evaluated too: its
 * value is substituted into the expression before bash evaluates it.
 */
function collectCode(parts: readonly WordPart[], code: Code, context?: 'arith'): void {
  for (const p of parts) {
    if (p.kind === 'sub') pushAll(code.commands, p.commands);
    else if (p.kind === 'dyn') mergeCode(code, p);
    else if (p.kind === 'var' && context === 'arith')
      code.evaluates.push({ name: p.name, as: 'arith' });
  }
}

/** An arithmetic closer: the length of one of `closers` at a position, or -1. */
function closer(...closers: string[]): (s: string, i: number) => number {
  return (s, i) => {
    for (const c of closers) if (s.startsWith(c, i)) return c.length;
    return -1;
  };
}

/** `to.push(...from)` without spreading: a long line can hold more items than a call's arguments. */
function pushAll<T>(to: T[], from: readonly T[]): void {
  for (const item of from) to.push(item);
}

/** Commands nested in a word's command substitutions and expansions' operands. */
function wordCommands(word: Word | undefined): SimpleCommand[] {
  if (!word) return [];
  return word.parts.flatMap((p) => (p.kind === 'sub' || p.kind === 'dyn' ? p.commands : []));
}

/**
 * What a `[[ … ]]` evaluates beyond its substitutions: the operands of `-eq`, `-lt`, … are
 * arithmetic (a literal `'a[$(id)]'` runs `id`), and the operand of `-v` is a name whose
 * subscript is arithmetic.
 */
function conditionalCode(words: Word[], budget: Budget, depth: number): Code {
  const code = emptyCode();
  const arithmetic = (word: Word | undefined) => {
    if (!word) return;
    for (const p of word.parts) {
      if (p.kind === 'var') code.evaluates.push({ name: p.name, as: 'arith' });
      else if (p.kind === 'lit') mergeCode(code, parseArithmetic(p.text, budget, depth + 1));
    }
  };
  words.forEach((word, i) => {
    const text = plainText(word);
    if (text !== undefined && ARITH_TESTS.has(text)) {
      arithmetic(words[i - 1]);
      arithmetic(words[i + 1]);
    } else if (text === '-v') {
      arithmetic(words[i + 1]);
    }
  });
  return code;
}

function parseTokens(tokens: Token[], budget: Budget, depth: number): SimpleCommand[] {
  const out: SimpleCommand[] = [];
  let cur = emptyCommand(false);
  /** Words that are data, not a command (for/case headers, [[ ]]): only their substitutions run. */
  let skipUntil: 'separator' | 'in' | ']]' | undefined;
  const cases: ('pattern' | 'body')[] = [];
  let skipNextWord = false;
  /** The words of the `[[ … ]]` being read. */
  let conditional: Word[] = [];
  /** The header of the `for` / `select` being read. */
  let loop: { name?: string; values: Word[]; list: boolean } | undefined;
  const endLoop = () => {
    if (loop?.name !== undefined) {
      budget.command();
      out.push({
        ...emptyCommand(false),
        loop: { name: loop.name, values: loop.list ? loop.values : undefined },
      });
    }
    loop = undefined;
  };

  const finish = (piped: boolean) => {
    for (const a of cur.assignments) pushAll(out, wordCommands(a.value));
    for (const w of cur.words) pushAll(out, wordCommands(w));
    for (const r of cur.redirects) {
      pushAll(out, wordCommands(r.target));
      pushAll(out, wordCommands(r.heredocWord));
    }
    if (cur.words.length > 0 || cur.assignments.length > 0 || cur.evaluates.length > 0) {
      budget.command();
      out.push(cur);
    }
    cur = emptyCommand(piped);
  };
  /** A command of its own for what `(( … ))` or `[[ … ]]` evaluates. */
  const evaluated = (code: Code) => {
    pushAll(out, code.commands);
    if (code.evaluates.length === 0) return;
    budget.command();
    out.push({ ...emptyCommand(false), evaluates: code.evaluates });
  };

  for (let k = 0; k < tokens.length; k++) {
    const tok = tokens[k]!;
    if (tok.t === 'arith') {
      evaluated(tok.code);
      continue;
    }
    if (tok.t === 'op') {
      if (skipUntil === 'separator' && (tok.op === ';' || tok.op === '\n')) {
        skipUntil = undefined;
        endLoop();
      }
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
        evaluated(conditionalCode(conditional, budget, depth));
        conditional = [];
      } else if (skipUntil === ']]') {
        conditional.push(word);
      } else if (skipUntil === 'separator' && text === 'do') {
        skipUntil = undefined;
        endLoop();
      } else if (loop && loop.name === undefined) {
        if (text !== undefined && /^[A-Za-z_][A-Za-z0-9_]*$/.test(text)) loop.name = text;
      } else if (loop && !loop.list && text === 'in') {
        loop.list = true;
      } else if (loop?.list) {
        loop.values.push(word);
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
        if (text === 'coproc') {
          // coproc NAME { …; } / coproc NAME ( … ): NAME is not a command.
          const name = tokens[k + 1];
          const after = tokens[k + 2];
          if (
            name?.t === 'word' &&
            ((after?.t === 'word' && plainText(after.word) === '{') ||
              (after?.t === 'op' && after.op === '('))
          ) {
            k++;
          }
          continue;
        }
        if (SKIP_KEYWORDS.has(text)) continue;
        if (text === 'esac') {
          cases.pop();
          continue;
        }
        if (text === 'for' || text === 'select') {
          skipUntil = 'separator';
          loop = { values: [], list: false };
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
