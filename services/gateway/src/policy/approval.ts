import type { Config } from '@toolgate/config';
import type { Tool } from '@toolgate/registry';

/**
 * Which calls wait for a person (human in the loop): destructive tools, and any the operator
 * lists in `policy.approval.tools`. Listings show it; the pipeline parks such calls. With
 * `policy.cedar.destructiveApproval: policies`, a destructive tool's approval is the Cedar
 * policies' to ask for (`@approval("required")`, docs/policy.md); a tool that asks for one
 * itself or is listed still always needs one.
 */
export function approvalRule(
  policy: Config['policy']['approval'],
  destructive: 'always' | 'policies' = 'always',
): (tool: Tool) => boolean {
  const listed = new Set(policy.tools);
  if (destructive === 'policies')
    return (tool) =>
      listed.has(tool.name) || (tool.requiresApproval && tool.risk !== 'destructive');
  return (tool) => tool.requiresApproval || listed.has(tool.name);
}
