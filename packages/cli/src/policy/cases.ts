/**
 * The case file of `toolgate policy test` (docs/policy.md): requests and the decision each must
 * get. Read strictly — an unknown or misspelt field is an error naming the case and the field,
 * so a typo cannot turn a case into one that passes by testing nothing.
 */
import type { BudgetUse, PolicyOutcome, PolicyRequest } from '@toolgate/policy';
import { parse } from 'yaml';

export interface PolicyCase {
  name: string;
  request: PolicyRequest;
  expect: PolicyOutcome;
  /** The ids that must decide it (the deciding forbids of a deny, the satisfied permits else). */
  policies?: string[];
}

export interface CaseFile {
  /** `policies:` and `schema:` as written (relative to the case file). */
  policies?: string;
  schema?: string;
  cases: PolicyCase[];
}

/** A case file that cannot be read as one: where (`case 3 (name): tool.name`) and why. */
export class CaseFileError extends Error {
  constructor(
    readonly where: string,
    message: string,
  ) {
    super(`${where}: ${message}`);
    this.name = 'CaseFileError';
  }
}

const OUTCOMES: readonly PolicyOutcome[] = ['allow', 'deny', 'approval'];
/** A tool without `category` or `upstream` is in this category. */
export const DEFAULT_CATEGORY = 'general';

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Reads and checks a case file's text. Throws CaseFileError. */
export function parseCases(text: string): CaseFile {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new CaseFileError('file', `not YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const top: Obj = Array.isArray(doc) ? { cases: doc } : isObj(doc) ? doc : {};
  if (!isObj(doc) && !Array.isArray(doc))
    throw new CaseFileError('file', 'must be a list of cases, or {policies?, schema?, cases}');
  known(top, ['policies', 'schema', 'cases'], 'file');
  const list = top.cases;
  if (!Array.isArray(list) || list.length === 0)
    throw new CaseFileError('cases', 'must be a non-empty list');
  const file: CaseFile = {
    cases: list.map((c, i) => readCase(c, i)),
    ...optional('policies', str(top.policies, 'file', 'policies', false)),
    ...optional('schema', str(top.schema, 'file', 'schema', false)),
  };
  const names = new Set<string>();
  for (const [i, c] of file.cases.entries()) {
    if (names.has(c.name))
      throw new CaseFileError(`case ${i + 1} (${c.name})`, 'name: used by an earlier case');
    names.add(c.name);
  }
  return file;
}

function readCase(raw: unknown, index: number): PolicyCase {
  const at0 = `case ${index + 1}`;
  if (!isObj(raw)) throw new CaseFileError(at0, 'must be a mapping');
  const name = str(raw.name, at0, 'name', true)!;
  const at = `${at0} (${name})`;
  known(raw, ['name', 'principal', 'tool', 'action', 'args', 'context', 'expect', 'policies'], at);

  const p = obj(raw.principal, at, 'principal', true)!;
  known(p, ['client', 'user', 'groups'], at, 'principal.');
  const user = str(p.user, at, 'principal.user', false);
  const groups = strings(p.groups, at, 'principal.groups');

  const t = obj(raw.tool, at, 'tool', true)!;
  known(t, ['name', 'category', 'upstream', 'annotations'], at, 'tool.');
  const upstream = str(t.upstream, at, 'tool.upstream', false);
  const hints = obj(t.annotations, at, 'tool.annotations', false) ?? {};
  known(hints, ['readOnly', 'destructive'], at, 'tool.annotations.');

  const action = raw.action ?? 'call';
  if (action !== 'call' && action !== 'approve')
    throw new CaseFileError(at, 'action: must be call or approve');
  const expect = raw.expect;
  if (!OUTCOMES.includes(expect as PolicyOutcome))
    throw new CaseFileError(at, `expect: must be one of ${OUTCOMES.join(', ')}`);

  const c = obj(raw.context, at, 'context', false) ?? {};
  known(c, ['codeMode', 'session', 'budget', 'sourceIp', 'conversationId', 'now'], at, 'context.');
  const request: PolicyRequest = {
    action,
    principal: {
      client: str(p.client, at, 'principal.client', true)!,
      ...optional('user', user),
      ...optional('groups', groups),
    },
    tool: {
      name: str(t.name, at, 'tool.name', true)!,
      category:
        str(t.category, at, 'tool.category', false) ??
        (upstream === undefined ? DEFAULT_CATEGORY : `upstream:${upstream}`),
      ...optional('upstream', upstream),
      readOnly: bool(hints.readOnly, at, 'tool.annotations.readOnly'),
      destructive: bool(hints.destructive, at, 'tool.annotations.destructive'),
    },
    args: obj(raw.args, at, 'args', false) ?? {},
    ...optional('conversationId', str(c.conversationId, at, 'context.conversationId', false)),
    ...optional('sourceIp', str(c.sourceIp, at, 'context.sourceIp', false)),
    ...optional('session', str(c.session, at, 'context.session', false)),
    ...optional('codeMode', codeMode(c.codeMode, at)),
    ...optional('budget', budget(c.budget, at)),
    ...optional('now', now(c.now, at)),
  };
  return {
    name,
    request,
    expect: expect as PolicyOutcome,
    ...optional('policies', strings(raw.policies, at, 'policies')),
  };
}

function optional<K extends string, V>(key: K, v: V | undefined): { [k in K]?: V } {
  return (v === undefined ? {} : { [key]: v }) as { [k in K]?: V };
}

function known(o: Obj, fields: string[], at: string, prefix = ''): void {
  for (const k of Object.keys(o))
    if (!fields.includes(k))
      throw new CaseFileError(
        at,
        `${prefix}${k}: unknown field (expected ${fields.map((f) => prefix + f).join(', ')})`,
      );
}

function str(v: unknown, at: string, field: string, required: boolean): string | undefined {
  if (v === undefined || v === null) {
    if (required) throw new CaseFileError(at, `${field}: required`);
    return undefined;
  }
  if (typeof v !== 'string' || v.length === 0)
    throw new CaseFileError(at, `${field}: must be a non-empty string`);
  return v;
}

function obj(v: unknown, at: string, field: string, required: boolean): Obj | undefined {
  if (v === undefined || v === null) {
    if (required) throw new CaseFileError(at, `${field}: required`);
    return undefined;
  }
  if (!isObj(v)) throw new CaseFileError(at, `${field}: must be a mapping`);
  return v;
}

function bool(v: unknown, at: string, field: string): boolean {
  if (v === undefined) return false;
  if (typeof v !== 'boolean') throw new CaseFileError(at, `${field}: must be true or false`);
  return v;
}

function strings(v: unknown, at: string, field: string): string[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string' && s.length > 0))
    throw new CaseFileError(at, `${field}: must be a list of names`);
  return v as string[];
}

/** `codeMode: true` (a nested call of run_code_with_tools) or `{parentTool}`. */
function codeMode(v: unknown, at: string): { parentTool: string } | undefined {
  if (v === undefined || v === false) return undefined;
  if (v === true) return { parentTool: 'run_code_with_tools' };
  const o = obj(v, at, 'context.codeMode', false)!;
  known(o, ['parentTool'], at, 'context.codeMode.');
  return { parentTool: str(o.parentTool, at, 'context.codeMode.parentTool', true)! };
}

function budget(v: unknown, at: string): Record<string, BudgetUse> | undefined {
  const o = obj(v, at, 'context.budget', false);
  if (o === undefined) return undefined;
  const out: Record<string, BudgetUse> = {};
  for (const [kind, use] of Object.entries(o)) {
    const u = isObj(use) ? use : {};
    if (typeof u.used !== 'number' || typeof u.limit !== 'number')
      throw new CaseFileError(at, `context.budget.${kind}: must be {used, limit} (numbers)`);
    out[kind] = { used: u.used, limit: u.limit };
  }
  return out;
}

function now(v: unknown, at: string): Date | undefined {
  if (v === undefined) return undefined;
  // YAML reads an unquoted timestamp as text here (the core schema has no dates).
  const d = typeof v === 'string' ? new Date(v) : undefined;
  if (d === undefined || Number.isNaN(d.getTime()))
    throw new CaseFileError(at, 'context.now: must be an ISO 8601 time');
  return d;
}
