/**
 * The work budget of one policy check. The check runs synchronously on the gateway's event loop
 * (and again on the worker), so its cost must not depend on the input's shape: brace products,
 * variable doubling and nesting grow exponentially in a few characters. Every expansion is
 * counted as it is produced and the check stops with TooComplexError — the command is refused,
 * never computed — once any limit is passed. The limits keep the worst case at a few ms.
 */

export interface BudgetLimits {
  /** Units of scanning work: characters lexed (re-lexed bodies count again), arguments examined. */
  steps: number;
  /** Simple commands parsed (nested ones and `find -exec` commands included). */
  commands: number;
  /** Fields produced by word expansion (source words, brace alternatives, split variables). */
  words: number;
  /** Characters produced by expansion: field text and variable values. */
  chars: number;
  /** Nesting: `$(…)`, backticks, `<(…)`, here-documents, subshells, `$((…))`, `${…}`, braces. */
  depth: number;
}

/**
 * Sized from run_shell's 32 Ki-character command: a real command line uses a small fraction of
 * each, and at these figures the worst input costs a few ms (docs/policy-budgets.md).
 */
export const DEFAULT_BUDGET: Readonly<BudgetLimits> = {
  steps: 131_072,
  commands: 2_000,
  words: 20_000,
  chars: 256_000,
  depth: 12,
};

/** The check gave up: the command needs more work than the budget allows. */
export class TooComplexError extends Error {
  constructor(
    readonly limit: keyof BudgetLimits,
    message: string,
  ) {
    super(message);
    this.name = 'TooComplexError';
  }
}

export class Budget {
  private steps = 0;
  private commands = 0;
  private words = 0;
  private chars = 0;

  constructor(readonly limits: Readonly<BudgetLimits> = DEFAULT_BUDGET) {}

  /** Charges `n` units of scanning work. */
  step(n: number): void {
    this.steps += n;
    if (this.steps > this.limits.steps) {
      throw new TooComplexError('steps', 'it needs too much work to check');
    }
  }

  /** Charges one simple command. */
  command(): void {
    if (++this.commands > this.limits.commands) {
      throw new TooComplexError(
        'commands',
        `it runs more than ${this.limits.commands} simple commands`,
      );
    }
  }

  /** Charges `count` produced fields holding `chars` characters in total. */
  produce(count: number, chars: number): void {
    this.words += count;
    this.chars += chars;
    if (this.words > this.limits.words) {
      throw new TooComplexError(
        'words',
        `it expands to more than ${this.limits.words} words (brace or variable expansion)`,
      );
    }
    if (this.chars > this.limits.chars) {
      throw new TooComplexError(
        'chars',
        `it expands to more than ${this.limits.chars} characters (brace or variable expansion)`,
      );
    }
  }

  /** Would `count` more fields of `chars` characters still fit? (Checked before building them.) */
  fits(count: number, chars: number): boolean {
    return this.words + count <= this.limits.words && this.chars + chars <= this.limits.chars;
  }

  /** Throws when `depth` levels of nesting are more than allowed. */
  nest(depth: number, what: string): void {
    if (depth > this.limits.depth) {
      throw new TooComplexError(
        'depth',
        `${what} nests more than ${this.limits.depth} levels deep`,
      );
    }
  }
}
