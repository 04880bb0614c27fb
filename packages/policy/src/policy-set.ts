/** Reads a policy folder (or file) and its schema, and checks them with Cedar before use. */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import {
  checkParsePolicySet,
  checkParseSchema,
  policySetTextToParts,
  policyToJson,
  preparsePolicySet,
  validate,
  type DetailedError,
} from '@cedar-policy/cedar-wasm/nodejs';
import { PolicySetError, type PolicyProblem } from './errors.js';
import { APPROVAL_ANNOTATION, EntityType, ID_ANNOTATION, REASON_ANNOTATION } from './names.js';

export interface PolicySource {
  /** A `.cedar` file or a folder of them (read in name order, not recursively). */
  policies: string;
  /** The `.cedarschema` file. */
  schema: string;
}

export interface PolicyInfo {
  id: string;
  file: string;
  effect: 'permit' | 'forbid';
  reason?: string;
  approval: boolean;
  /** Every annotation of the policy (`@id`, `@reason`, `@approval` and the author's own). */
  annotations: Record<string, string>;
  text: string;
}

/** A parsed, validated set, preparsed in the engine under its hash. */
export interface LoadedPolicySet {
  /** sha256 of the files' names and contents (first 16 hex digits): equal sets, equal hashes. */
  hash: string;
  policies: ReadonlyMap<string, PolicyInfo>;
  /** Policy id → text, as Cedar takes a set. */
  texts: Record<string, string>;
  schema: string;
  /**
   * The preparsed set that decides a call to `tool`: Cedar tries every policy of a set, so each
   * tool a policy names (`resource == Toolgate::Tool::"x"`) gets a slice of its own — those
   * policies and the ones naming no tool — and other tools the latter only. A policy for
   * another tool can never be satisfied, nor fail, for this one: the decision is the same.
   */
  sliceFor(tool: string): string;
}

/** The `.cedar` files a source names, in name order. */
export function policyFiles(path: string): string[] {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .filter((f) => f.endsWith('.cedar'))
    .sort()
    .map((f) => join(path, f));
}

/** Reads, parses and validates a set. Throws PolicySetError listing every problem. */
export function loadPolicySet(source: PolicySource): LoadedPolicySet {
  const problems: PolicyProblem[] = [];
  const hash = createHash('sha256');
  const schemaName = basename(source.schema);
  let schema: string;
  let files: string[];
  try {
    schema = readFileSync(source.schema, 'utf8');
    files = policyFiles(source.policies);
  } catch (err) {
    throw new PolicySetError([{ file: source.schema, message: (err as Error).message }], {
      cause: err,
    });
  }
  hash.update(`schema\0${schema}\0`);
  const parsedSchema = checkParseSchema(schema);
  if (parsedSchema.type === 'failure') {
    for (const e of parsedSchema.errors)
      problems.push({ file: schemaName, message: describe(e, schema) });
  }
  if (files.length === 0)
    problems.push({ file: basename(source.policies), message: 'no .cedar files' });
  const policies = new Map<string, PolicyInfo>();
  const texts: Record<string, string> = {};
  /** Policies whose scope names one tool: id → the tool. */
  const forTool = new Map<string, string>();
  for (const path of files) {
    const file = basename(path);
    const text = readFileSync(path, 'utf8');
    hash.update(`${file}\0${text}\0`);
    const parsed = checkParsePolicySet({ staticPolicies: text });
    if (parsed.type === 'failure') {
      for (const e of parsed.errors) problems.push({ file, message: describe(e, text) });
      continue;
    }
    const parts = policySetTextToParts(text);
    if (parts.type === 'failure') {
      for (const e of parts.errors) problems.push({ file, message: describe(e, text) });
      continue;
    }
    if (parts.policy_templates.length > 0) {
      problems.push({ file, message: 'templates (?principal, ?resource) are not supported' });
    }
    // Parts come sorted by Cedar's ids (policy0, policy1, policy10, …): the same order
    // recovers each policy's id in its file.
    const cedarIds = parts.policies.map((_, i) => `policy${i}`).sort();
    for (const [i, policy] of parts.policies.entries()) {
      const json = policyToJson(policy);
      if (json.type === 'failure') {
        for (const e of json.errors) problems.push({ file, message: describe(e, policy) });
        continue;
      }
      const a = json.json.annotations ?? {};
      const id = a[ID_ANNOTATION] ?? `${file}:${cedarIds[i]}`;
      const seen = policies.get(id);
      if (seen) {
        problems.push({
          file,
          policy: id,
          message: `@id("${id}") is used twice (also in ${seen.file})`,
        });
        continue;
      }
      const r = json.json.resource;
      if (r.op === '==' && 'entity' in r) {
        const e = '__entity' in r.entity ? r.entity.__entity : r.entity;
        if (e.type === EntityType.Tool) forTool.set(id, e.id);
      }
      policies.set(id, {
        id,
        file,
        effect: json.json.effect,
        ...(a[REASON_ANNOTATION] === undefined ? {} : { reason: a[REASON_ANNOTATION] }),
        approval: a[APPROVAL_ANNOTATION] === 'required',
        annotations: { ...a },
        text: policy,
      });
      texts[id] = policy;
    }
  }
  // The files that parsed are validated even when others did not: every problem at once.
  if (parsedSchema.type === 'success' && Object.keys(texts).length > 0) {
    const validated = validate({
      schema,
      policies: { staticPolicies: texts },
      validationSettings: { mode: 'strict' },
    });
    if (validated.type === 'failure') {
      for (const e of validated.errors) problems.push({ file: schemaName, message: e.message });
    } else {
      for (const e of validated.validationErrors) {
        problems.push({
          file: policies.get(e.policyId)?.file ?? basename(source.policies),
          policy: e.policyId,
          message: e.error.message,
        });
      }
    }
  }
  if (problems.length > 0) throw new PolicySetError(problems);
  const digest = hash.digest('hex').slice(0, 16);
  const general: Record<string, string> = {};
  const byTool = new Map<string, Record<string, string>>();
  for (const [id, text] of Object.entries(texts)) {
    const tool = forTool.get(id);
    if (tool === undefined) general[id] = text;
    else byTool.set(tool, { ...byTool.get(tool), [id]: text });
  }
  const slices: [string, Record<string, string>][] = [
    [`${digest}:*`, general],
    ...[...byTool].map(([tool, own]): [string, Record<string, string>] => [
      `${digest}:${tool}`,
      { ...general, ...own },
    ]),
  ];
  for (const [name, set] of slices) {
    const pre = preparsePolicySet(name, { staticPolicies: set });
    if (pre.type === 'failure') {
      throw new PolicySetError(
        pre.errors.map((e) => ({ file: basename(source.policies), message: e.message })),
      );
    }
  }
  return {
    hash: digest,
    policies,
    texts,
    schema,
    sliceFor: (tool) => (byTool.has(tool) ? `${digest}:${tool}` : `${digest}:*`),
  };
}

/** Cedar's message with the line it points at. */
function describe(e: DetailedError, text: string): string {
  const at = e.sourceLocations?.[0];
  const line = at === undefined ? undefined : text.slice(0, at.start).split('\n').length;
  const label = at?.label ? ` (${at.label})` : '';
  return `${line === undefined ? '' : `line ${line}: `}${e.message}${label}`;
}
