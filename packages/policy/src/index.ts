export { PolicyEngine } from './engine.js';
export { PolicyContextError, PolicySetError } from './errors.js';
export { loadPolicySet, policyFiles } from './policy-set.js';
export { MAX_ARGS_CHARS, MAX_ARGS_DEPTH, MAX_ARGS_VALUES, argsRecord } from './context.js';
export { NAMESPACE } from './names.js';
export type {
  Listability,
  PolicyDecision,
  PolicyEngineOptions,
  PolicyOutcome,
  PolicyState,
} from './engine.js';
export type { PolicyProblem } from './errors.js';
export type { LoadedPolicySet, PolicyInfo, PolicySource } from './policy-set.js';
export type { BudgetUse, PolicyPrincipal, PolicyRequest, PolicyTool } from './context.js';
export type { PolicyAction } from './names.js';
