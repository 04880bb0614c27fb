/** Policies applied to tool calls before they run (docs/spec.md §6). */
export { checkShellCommand, POLICY_DENIED } from './shell-policy.js';
export { shellPolicyError } from './tool-error.js';
export { parseShell, ShellSyntaxError } from './shell-syntax.js';
export { Budget, DEFAULT_BUDGET, TooComplexError } from './budget.js';

export type { ShellCheckResult, ShellPolicy, ShellRule } from './shell-policy.js';
export type { SimpleCommand, Word, WordPart, Redirect, Assignment } from './shell-syntax.js';
export type { BudgetLimits } from './budget.js';
