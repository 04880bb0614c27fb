import { Type, ToolError, defineTool } from '@toolgate/registry';

/**
 * Arithmetic by a small recursive-descent parser — never eval/Function. Grammar:
 *   expr := term (('+'|'-') term)*      term := unary (('*'|'/'|'%') unary)*
 *   unary := ('-'|'+') unary | power    power := primary ('**' unary)?   (right-assoc)
 *   primary := number | constant | fn '(' expr (',' expr)* ')' | '(' expr ')'
 */
// Maps, not object literals: a name like "constructor" must not reach Object.prototype.
const FUNCTIONS = new Map<string, (...args: number[]) => number>(
  Object.entries({
    abs: Math.abs,
    sqrt: Math.sqrt,
    cbrt: Math.cbrt,
    exp: Math.exp,
    ln: Math.log,
    log: Math.log10,
    log10: Math.log10,
    log2: Math.log2,
    sin: Math.sin,
    cos: Math.cos,
    tan: Math.tan,
    asin: Math.asin,
    acos: Math.acos,
    atan: Math.atan,
    atan2: Math.atan2,
    sinh: Math.sinh,
    cosh: Math.cosh,
    tanh: Math.tanh,
    floor: Math.floor,
    ceil: Math.ceil,
    round: Math.round,
    trunc: Math.trunc,
    sign: Math.sign,
    min: Math.min,
    max: Math.max,
    pow: Math.pow,
    hypot: Math.hypot,
  }),
);
const CONSTANTS = new Map<string, number>([
  ['pi', Math.PI],
  ['e', Math.E],
  ['tau', 2 * Math.PI],
]);
const MAX_LENGTH = 1000;
const MAX_DEPTH = 100;

type Token =
  { kind: 'num'; value: number; pos: number } | { kind: 'op' | 'id'; value: string; pos: number };

function tokenize(input: string): Token[] {
  const tokens: Token[] = [];
  const re =
    /\s*(?:(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|(\*\*|[-+*/%(),^])|([A-Za-z_][A-Za-z0-9_]*))/y;
  let pos = 0;
  while (pos < input.length) {
    if (/^\s*$/.test(input.slice(pos))) break;
    re.lastIndex = pos;
    const m = re.exec(input);
    if (!m)
      throw syntax(
        `unexpected character "${input[pos + (input.slice(pos).length - input.slice(pos).trimStart().length)]}"`,
        pos,
      );
    const at = pos + m[0].length - (m[1] ?? m[2] ?? m[3] ?? '').length;
    if (m[1] !== undefined) tokens.push({ kind: 'num', value: Number(m[1]), pos: at });
    else if (m[2] !== undefined)
      tokens.push({ kind: 'op', value: m[2] === '^' ? '**' : m[2], pos: at });
    else tokens.push({ kind: 'id', value: m[3]!.toLowerCase(), pos: at });
    pos = re.lastIndex;
  }
  return tokens;
}

function syntax(message: string, pos: number): ToolError {
  return new ToolError('invalid_expression', `${message} at position ${pos + 1}`);
}

class Parser {
  private i = 0;
  private depth = 0;

  constructor(private readonly tokens: Token[]) {}

  parse(): number {
    if (this.tokens.length === 0)
      throw new ToolError('invalid_expression', 'the expression is empty');
    const value = this.expr();
    const extra = this.tokens[this.i];
    if (extra) throw syntax(`unexpected "${extra.value}"`, extra.pos);
    return value;
  }

  private peek(): Token | undefined {
    return this.tokens[this.i];
  }

  private isOp(value: string): boolean {
    const t = this.peek();
    return t?.kind === 'op' && t.value === value;
  }

  private expect(value: string): void {
    const t = this.peek();
    if (!this.isOp(value)) {
      throw t
        ? syntax(`expected "${value}" but found "${t.value}"`, t.pos)
        : new ToolError('invalid_expression', `expected "${value}" at the end`);
    }
    this.i++;
  }

  private expr(): number {
    if (++this.depth > MAX_DEPTH)
      throw new ToolError('invalid_expression', 'the expression is nested too deeply');
    let value = this.term();
    while (this.isOp('+') || this.isOp('-')) {
      const op = (this.tokens[this.i++] as Token).value;
      const rhs = this.term();
      value = op === '+' ? value + rhs : value - rhs;
    }
    this.depth--;
    return value;
  }

  private term(): number {
    let value = this.unary();
    while (this.isOp('*') || this.isOp('/') || this.isOp('%')) {
      const op = (this.tokens[this.i++] as Token).value;
      const rhs = this.unary();
      if ((op === '/' || op === '%') && rhs === 0)
        throw new ToolError('division_by_zero', 'division by zero');
      value = op === '*' ? value * rhs : op === '/' ? value / rhs : value % rhs;
    }
    return value;
  }

  private unary(): number {
    if (this.isOp('-') || this.isOp('+')) {
      if (++this.depth > MAX_DEPTH)
        throw new ToolError('invalid_expression', 'the expression is nested too deeply');
      const op = (this.tokens[this.i++] as Token).value;
      const value = this.unary();
      this.depth--;
      return op === '-' ? -value : value;
    }
    return this.power();
  }

  private power(): number {
    const base = this.primary();
    if (this.isOp('**')) {
      this.i++;
      return base ** this.unary();
    }
    return base;
  }

  private primary(): number {
    const t = this.peek();
    if (!t) throw new ToolError('invalid_expression', 'the expression ends too early');
    this.i++;
    if (t.kind === 'num') return t.value;
    if (t.kind === 'op' && t.value === '(') {
      const value = this.expr();
      this.expect(')');
      return value;
    }
    if (t.kind === 'id') {
      if (this.isOp('(')) {
        const fn = FUNCTIONS.get(t.value);
        if (!fn) throw syntax(`unknown function "${t.value}"`, t.pos);
        this.i++;
        const args = [this.expr()];
        while (this.isOp(',')) {
          this.i++;
          args.push(this.expr());
        }
        this.expect(')');
        return fn(...args);
      }
      const constant = CONSTANTS.get(t.value);
      if (constant === undefined) throw syntax(`unknown name "${t.value}"`, t.pos);
      return constant;
    }
    throw syntax(`unexpected "${t.value}"`, t.pos);
  }
}

export function evaluate(expression: string): number {
  if (expression.length > MAX_LENGTH) {
    throw new ToolError(
      'invalid_expression',
      `the expression is longer than ${MAX_LENGTH} characters`,
    );
  }
  const value = new Parser(tokenize(expression)).parse();
  if (!Number.isFinite(value)) {
    throw new ToolError('not_finite', `the result is not a finite number (${value})`);
  }
  return value;
}

export const calculator = defineTool({
  name: 'calculator',
  description:
    'Evaluate an arithmetic expression exactly as written. Supports + - * / % ** (or ^), parentheses, unary minus, constants pi, e, tau and functions such as sqrt, abs, ln, log, log2, sin, cos, tan, floor, ceil, round, min, max, pow.',
  category: 'math',
  parameters: Type.Object({
    expression: Type.String({
      minLength: 1,
      maxLength: MAX_LENGTH,
      description: 'e.g. "2*(3+4)" or "sqrt(2)/2"',
    }),
  }),
  // A bare number for REST and the dialects; MCP wraps it as {"result": 14} (FastMCP's way).
  result: Type.Number({ description: 'The value of the expression (a finite number)' }),
  timeoutMs: 1000,
  idempotent: true,
  handler: ({ expression }) => evaluate(expression),
});
