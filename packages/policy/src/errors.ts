/** Errors of the policy package: each carries a stable code the gateway answers with. */

/** Where a policy set is wrong: the file, the policy when known, and Cedar's message. */
export interface PolicyProblem {
  file: string;
  policy?: string;
  message: string;
}

/** A policy set or schema that does not parse or validate (docs/policy.md). */
export class PolicySetError extends Error {
  readonly code = 'policy_invalid';
  readonly problems: PolicyProblem[];

  constructor(problems: PolicyProblem[], options: { cause?: unknown } = {}) {
    super(
      `the Cedar policies are invalid: ${problems
        .slice(0, 5)
        .map((p) => `${p.file}${p.policy ? ` (${p.policy})` : ''}: ${p.message}`)
        .join('; ')}${problems.length > 5 ? `; and ${problems.length - 5} more` : ''}`,
      options,
    );
    this.name = 'PolicySetError';
    this.problems = problems;
  }
}

/**
 * A call whose context cannot be given to the policies as it is: past the bounds, or with a
 * value Cedar would read as something else. The call is refused, never decided without it.
 */
export class PolicyContextError extends Error {
  readonly code: 'policy_context_too_large' | 'policy_context_unrepresentable';
  readonly path: string;

  constructor(code: PolicyContextError['code'], path: string, message: string) {
    super(message);
    this.name = 'PolicyContextError';
    this.code = code;
    this.path = path;
  }
}
