import type { Config } from '@toolgate/config';
import type { Tool } from '@toolgate/registry';

/**
 * Which calls wait for a person (human in the loop): destructive tools, and any the operator
 * lists in `policy.approval.tools`. Listings show it; the pipeline parks such calls.
 */
export function approvalRule(policy: Config['policy']['approval']): (tool: Tool) => boolean {
  const listed = new Set(policy.tools);
  return (tool) => tool.requiresApproval || listed.has(tool.name);
}
