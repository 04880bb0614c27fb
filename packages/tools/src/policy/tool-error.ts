import { ToolError } from '@toolgate/registry';
import { POLICY_DENIED, type ShellCheckResult, type ShellPolicy } from './shell-policy.js';

declare module '@toolgate/registry' {
  interface ToolServices {
    /** policy.shell from the config; run_shell refuses what it denies. */
    shellPolicy?: ShellPolicy;
  }
}

/** A denied command as the error the model reads: code policy_denied, the rule that matched. */
export function shellPolicyError(verdict: Extract<ShellCheckResult, { ok: false }>): ToolError {
  return new ToolError(POLICY_DENIED, verdict.message, {
    details: { rule: verdict.rule, ...(verdict.program ? { program: verdict.program } : {}) },
  });
}
