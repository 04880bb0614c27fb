/**
 * The names policies are written against: a contract with every deployment's policies
 * (docs/policy.md). Changing one breaks them.
 */
export const NAMESPACE = 'Toolgate';

export const EntityType = {
  Client: `${NAMESPACE}::Client`,
  User: `${NAMESPACE}::User`,
  Group: `${NAMESPACE}::Group`,
  Tool: `${NAMESPACE}::Tool`,
  Category: `${NAMESPACE}::Category`,
  Upstream: `${NAMESPACE}::Upstream`,
  Action: `${NAMESPACE}::Action`,
} as const;

export type PolicyAction = 'call' | 'approve';

/** The annotation naming a policy (`@id("…")`); without one its id is `<file>:policy<n>`. */
export const ID_ANNOTATION = 'id';
/** The annotation whose text a forbid's refusal carries as its message. */
export const REASON_ANNOTATION = 'reason';
/** `@approval("required")` on a satisfied permit parks the call for a person. */
export const APPROVAL_ANNOTATION = 'approval';
