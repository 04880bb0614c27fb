/**
 * The request a policy sees: entities and context built from a call, with the contract's names
 * (names.ts) and the bounds on arguments documented in docs/policy.md.
 */
import type {
  CedarValueJson,
  Context,
  EntityJson,
  EntityUid,
} from '@cedar-policy/cedar-wasm/nodejs';
import { PolicyContextError } from './errors.js';
import { EntityType, type PolicyAction } from './names.js';

/** Deepest nesting of objects and arrays in `context.args` (the top-level object is depth 1). */
export const MAX_ARGS_DEPTH = 8;
/** Values in `context.args` (each record field and set element counts one). */
export const MAX_ARGS_VALUES = 256;
/** Characters of `context.args` as Cedar JSON. */
export const MAX_ARGS_CHARS = 65_536;

/** Who calls (or approves): a client, or a user of it with its groups. */
export interface PolicyPrincipal {
  client: string;
  user?: string;
  groups?: readonly string[];
}

/** The tool as policies see it. */
export interface PolicyTool {
  name: string;
  category: string;
  /** The upstream an upstream tool comes from (`Toolgate::Upstream`). */
  upstream?: string;
  readOnly: boolean;
  destructive: boolean;
}

export interface BudgetUse {
  used: number;
  limit: number;
}

export interface PolicyRequest {
  action: PolicyAction;
  principal: PolicyPrincipal;
  tool: PolicyTool;
  /** The call's validated arguments. */
  args: Record<string, unknown>;
  conversationId?: string;
  /** The address the call came from; absent or unparsable: `0.0.0.0`. */
  sourceIp?: string;
  /** A code-mode script's nested call: the script's tool. */
  codeMode?: { parentTool: string };
  /** The session the call runs in. */
  session?: string;
  /** The caller's budget use by kind (`sandboxSeconds`, `calls`, …): filled by the budgets. */
  budget?: Record<string, BudgetUse>;
  now?: Date;
}

export interface CedarRequest {
  principal: EntityUid;
  action: EntityUid;
  resource: EntityUid;
  context: Context;
  entities: EntityJson[];
}

const uid = (type: string, id: string): { type: string; id: string } => ({ type, id });

export function principalUid(p: PolicyPrincipal): EntityUid {
  return p.user === undefined ? uid(EntityType.Client, p.client) : uid(EntityType.User, p.user);
}

/** The principal's and the tool's entities with their parents. */
export function entitiesOf(principal: PolicyPrincipal, tool: PolicyTool): EntityJson[] {
  const client = uid(EntityType.Client, principal.client);
  const category = uid(EntityType.Category, tool.category);
  const entities: EntityJson[] = [
    { uid: client, attrs: {}, parents: [] },
    {
      uid: uid(EntityType.Tool, tool.name),
      attrs: {},
      parents: [
        category,
        ...(tool.upstream === undefined ? [] : [uid(EntityType.Upstream, tool.upstream)]),
      ],
    },
    { uid: category, attrs: {}, parents: [] },
  ];
  if (tool.upstream !== undefined)
    entities.push({ uid: uid(EntityType.Upstream, tool.upstream), attrs: {}, parents: [] });
  if (principal.user !== undefined) {
    const groups = [...new Set(principal.groups ?? [])].map((g) => uid(EntityType.Group, g));
    entities.push({
      uid: uid(EntityType.User, principal.user),
      attrs: {},
      parents: [client, ...groups],
    });
    for (const g of groups) entities.push({ uid: g, attrs: {}, parents: [] });
  }
  return entities;
}

/** The whole request for Cedar. Throws PolicyContextError past the bounds. */
export function cedarRequest(req: PolicyRequest): CedarRequest {
  return {
    principal: principalUid(req.principal),
    action: uid(EntityType.Action, req.action),
    resource: uid(EntityType.Tool, req.tool.name),
    context: {
      args: argsRecord(req.args),
      conversationId: req.conversationId ?? '',
      now: { __extn: { fn: 'datetime', arg: (req.now ?? new Date()).toISOString() } },
      sourceIp: { __extn: { fn: 'ip', arg: ipOf(req.sourceIp) } },
      codeMode: { nested: req.codeMode !== undefined, parentTool: req.codeMode?.parentTool ?? '' },
      session: { active: req.session !== undefined, id: req.session ?? '' },
      annotations: { readOnly: req.tool.readOnly, destructive: req.tool.destructive },
      budget: budgetRecord(req.budget ?? {}),
    },
    entities: entitiesOf(req.principal, req.tool),
  };
}

function budgetRecord(budget: Record<string, BudgetUse>): Record<string, CedarValueJson> {
  const out: Record<string, CedarValueJson> = {};
  for (const [kind, { used, limit }] of Object.entries(budget)) {
    out[kind] = { used: Math.ceil(used), limit: Math.floor(limit) };
  }
  return out;
}

// IPv4 addresses as Node reports them on a dual-stack socket.
const MAPPED = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i;
const IP = /^(\d{1,3}(\.\d{1,3}){3}|[0-9a-f:]+)$/i;

function ipOf(address: string | undefined): string {
  const a = address?.replace(MAPPED, '$1');
  return a !== undefined && IP.test(a) ? a : '0.0.0.0';
}

/**
 * Arguments as a Cedar record. Strings, booleans and safe integers stay as they are; other
 * numbers (fractions, integers past 2^53) become their decimal text; null is left out; arrays
 * become sets. Past MAX_ARGS_DEPTH / MAX_ARGS_VALUES / MAX_ARGS_CHARS, or with a key Cedar's
 * JSON reserves (`__entity`, `__extn`, `__expr`: an argument must not name an entity), the call
 * is refused rather than decided on a cut copy.
 */
export function argsRecord(args: Record<string, unknown>): Record<string, CedarValueJson> {
  const state = { values: 0 };
  const out = convert(args, 'args', 1, state) as Record<string, CedarValueJson>;
  const chars = JSON.stringify(out).length;
  if (chars > MAX_ARGS_CHARS) {
    throw new PolicyContextError(
      'policy_context_too_large',
      'args',
      `the arguments are too large for the policies (${chars} characters as Cedar JSON; at most ${MAX_ARGS_CHARS})`,
    );
  }
  return out;
}

const RESERVED = new Set(['__entity', '__extn', '__expr']);

function convert(
  value: unknown,
  path: string,
  depth: number,
  state: { values: number },
): CedarValueJson | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isSafeInteger(value) ? value : String(value);
  if (typeof value !== 'object') return String(value);
  if (depth > MAX_ARGS_DEPTH) {
    throw new PolicyContextError(
      'policy_context_too_large',
      path,
      `the arguments nest deeper than the policies take (${path}; at most ${MAX_ARGS_DEPTH} levels)`,
    );
  }
  const count = () => {
    if (++state.values > MAX_ARGS_VALUES) {
      throw new PolicyContextError(
        'policy_context_too_large',
        path,
        `the arguments hold more values than the policies take (at most ${MAX_ARGS_VALUES})`,
      );
    }
  };
  if (Array.isArray(value)) {
    const set: CedarValueJson[] = [];
    for (const [i, v] of value.entries()) {
      count();
      const c = convert(v, `${path}[${i}]`, depth + 1, state);
      if (c !== undefined) set.push(c);
    }
    return set;
  }
  const record: Record<string, CedarValueJson> = {};
  for (const [k, v] of Object.entries(value)) {
    if (RESERVED.has(k)) {
      throw new PolicyContextError(
        'policy_context_unrepresentable',
        `${path}.${k}`,
        `the argument ${path}.${k} has a name Cedar reserves; the policies cannot be given it`,
      );
    }
    count();
    const c = convert(v, `${path}.${k}`, depth + 1, state);
    if (c !== undefined) record[k] = c;
  }
  return record;
}
