/**
 * Cedar policies on the gateway (docs/policy.md): a call's client, user, groups and tool as the
 * policy package names them, its decision as an ApiError or an approval, listings filtered.
 */
import {
  PolicyContextError,
  type BudgetUse,
  type Listability,
  type PolicyAction,
  type PolicyDecision,
  type PolicyEngine,
  type PolicyTool,
} from '@toolgate/policy';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import type { Client, ToolFilter } from '../clients.js';
import { ApiError } from '../errors.js';
import type { GatewayMetrics } from '../metrics.js';

/** Where a call comes from and how, beyond its client and tool. */
export interface PolicyCallContext {
  conversationId?: string;
  sourceIp?: string;
  /** A code-mode script's nested call: the script's tool. */
  codeMode?: { parentTool: string };
  session?: string;
}

/** The caller's budget use by kind, for `context.budget` (the spend budgets fill it). */
export type BudgetUseHook = (call: {
  client: string;
  user?: string;
  tool: string;
}) => Promise<Record<string, BudgetUse>>;

export class CallPolicy {
  constructor(
    readonly engine: PolicyEngine,
    private readonly metrics: GatewayMetrics,
    private readonly budgetUse?: BudgetUseHook,
  ) {}

  /**
   * The policies' decision on a call (or an approval of one). A context past its bounds is a
   * refusal (ApiError), never a call decided without it.
   */
  async decide(
    action: PolicyAction,
    client: Client,
    tool: Tool,
    args: Record<string, unknown>,
    at: PolicyCallContext = {},
    /** The budget use to decide with (POST /v1/policy/check); absent: the caller's own. */
    use?: Record<string, BudgetUse>,
  ): Promise<PolicyDecision> {
    const budget = use
      ? use
      : this.budgetUse
        ? await this.budgetUse({
            client: client.id,
            ...(client.user === undefined ? {} : { user: client.user }),
            tool: tool.name,
          })
        : {};
    let decision: PolicyDecision;
    try {
      decision = this.engine.decide({
        action,
        principal: principalOf(client),
        tool: policyTool(tool),
        args,
        budget,
        ...at,
      });
    } catch (err) {
      if (!(err instanceof PolicyContextError)) throw err;
      throw new ApiError(
        err.code === 'policy_context_too_large' ? 'policy_context_too_large' : 'invalid_arguments',
        err.message,
        { details: { path: err.path, code: err.code } },
      );
    }
    this.metrics.policyDecisions.inc({ action, decision: decision.decision });
    for (const policy of decision.errors) this.metrics.policyErrors.inc({ policy });
    return decision;
  }

  /** The refusal a deny answers with (403 `policy_denied`). */
  static denied(decision: PolicyDecision): ApiError {
    return new ApiError('policy_denied', decision.reason ?? 'denied by policy', {
      details: {
        policies: decision.policies,
        ...(decision.errors.length > 0 ? { errors: decision.errors } : {}),
      },
    });
  }

  listable(client: Client, tool: Tool): Listability {
    return this.engine.listable(principalOf(client), policyTool(tool));
  }
}

/**
 * What a caller's listings show: its scope, less the tools no policy could permit it to call
 * (docs/policy.md, listings). Without policies, its scope.
 */
export function listingScope(
  client: Client,
  policy: CallPolicy | undefined,
  registry: ToolRegistry,
): ToolFilter {
  if (!policy) return client.scope;
  return {
    allows(t) {
      if (!client.scope.allows(t)) return false;
      const tool = registry.get(t.name);
      return tool === undefined || policy.listable(client, tool).listed;
    },
  };
}

export function principalOf(client: Pick<Client, 'id' | 'user' | 'groups'>) {
  return {
    client: client.id,
    ...(client.user === undefined ? {} : { user: client.user }),
    ...(client.groups === undefined ? {} : { groups: client.groups }),
  };
}

/** The tool as policies see it: its upstream (`upstream:<id>` category) and annotations. */
export function policyTool(tool: Tool): PolicyTool {
  const upstream = tool.category.startsWith('upstream:') ? tool.category.slice(9) : undefined;
  const hints = tool.annotations ?? {};
  return {
    name: tool.name,
    category: tool.category,
    ...(upstream === undefined ? {} : { upstream }),
    readOnly: hints.readOnlyHint === true || (tool.risk === 'safe' && hints.readOnlyHint !== false),
    destructive: tool.risk === 'destructive' || hints.destructiveHint === true,
  };
}
