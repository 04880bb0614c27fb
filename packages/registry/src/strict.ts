/**
 * Whether a tool's parameter schema qualifies for OpenAI strict mode (Structured Outputs),
 * decided once when the tool is registered. Listings put `strict: true` only on tools that
 * qualify: a schema OpenAI would reject fails the model's whole request, a schema listed
 * without `strict` merely goes unenforced.
 *
 * Conservative on purpose. The keywords strict mode accepts have changed over time (string
 * `pattern`/`format`, number bounds and array `minItems`/`maxItems` arrived late and not for
 * every model; `minLength`/`maxLength`, `default` and the rest never did), so this is an
 * allow-list of what every strict-capable model accepts, and the size limits are the
 * original, smallest ones. A tool that does not qualify is listed without `strict`, as it
 * always was.
 */

type Json = Record<string, unknown>;

/** The keywords a strict schema may use; any other keyword disqualifies it. */
const ALLOWED = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'enum',
  'const',
  'anyOf',
  'description',
  'title',
  '$ref',
  '$defs',
  'definitions',
]);
const TYPES = new Set(['string', 'number', 'integer', 'boolean', 'object', 'array', 'null']);

export const STRICT_LIMITS = {
  /** Levels of nesting below the root object. */
  depth: 5,
  /** Object properties, all levels together. */
  properties: 100,
  /** Enum values, all enums together. */
  enumValues: 500,
} as const;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

interface Counts {
  properties: number;
  enumValues: number;
}

/**
 * Why `schema` does not qualify for strict mode, or undefined when it does: the root is an
 * object; every object lists all its properties in `required` and has
 * `additionalProperties: false` (an optional property is expressed as nullable, `type:
 * [T, "null"]` or `anyOf` with `{type: "null"}`); only allowed keywords; within the limits.
 */
export function strictSchemaIssue(schema: Json): string | undefined {
  if (schema.type !== 'object') return 'the root must be an object schema';
  if ('anyOf' in schema) return 'the root must not be an anyOf';
  const counts: Counts = { properties: 0, enumValues: 0 };
  const issue = check(schema, '', 0, counts);
  if (issue) return issue;
  if (counts.properties > STRICT_LIMITS.properties)
    return `more than ${STRICT_LIMITS.properties} properties in all`;
  if (counts.enumValues > STRICT_LIMITS.enumValues)
    return `more than ${STRICT_LIMITS.enumValues} enum values in all`;
  return undefined;
}

function check(s: Json, path: string, depth: number, counts: Counts): string | undefined {
  const at = path || '/';
  for (const key of Object.keys(s)) {
    if (!ALLOWED.has(key)) return `${at}: "${key}" is not supported in strict mode`;
  }
  if (depth > STRICT_LIMITS.depth) return `${at}: nested deeper than ${STRICT_LIMITS.depth} levels`;
  const types = s.type === undefined ? [] : Array.isArray(s.type) ? s.type : [s.type];
  for (const t of types) {
    if (typeof t !== 'string' || !TYPES.has(t)) return `${at}: type ${JSON.stringify(t)}`;
  }
  if (s.$ref !== undefined && (typeof s.$ref !== 'string' || !s.$ref.startsWith('#')))
    return `${at}: only local $ref`;
  if (s.enum !== undefined) {
    if (!Array.isArray(s.enum)) return `${at}: enum must be an array`;
    counts.enumValues += s.enum.length;
  }

  if (types.includes('object') || s.properties !== undefined) {
    if (!isObject(s.properties)) return `${at}: an object must list its properties`;
    if (s.additionalProperties !== false)
      return `${at}: an object must have additionalProperties: false`;
    const names = Object.keys(s.properties);
    const required = Array.isArray(s.required) ? s.required : [];
    for (const name of names) {
      if (!required.includes(name))
        return `${path}/properties/${name}: every property must be required (make an optional one nullable instead)`;
    }
    for (const name of required) {
      if (typeof name !== 'string' || !names.includes(name))
        return `${at}: required names an unknown property ${JSON.stringify(name)}`;
    }
    counts.properties += names.length;
    for (const [name, prop] of Object.entries(s.properties)) {
      if (!isObject(prop)) return `${path}/properties/${name}: must be a schema`;
      const issue = check(prop, `${path}/properties/${name}`, depth + 1, counts);
      if (issue) return issue;
    }
  } else if (s.additionalProperties !== undefined) {
    return `${at}: additionalProperties outside an object`;
  }

  if (s.items !== undefined) {
    if (!isObject(s.items)) return `${at}: items must be one schema`;
    const issue = check(s.items, `${path}/items`, depth + 1, counts);
    if (issue) return issue;
  }
  if (s.anyOf !== undefined) {
    if (!Array.isArray(s.anyOf) || s.anyOf.length === 0)
      return `${at}: anyOf must be a non-empty array`;
    for (const [i, branch] of s.anyOf.entries()) {
      if (!isObject(branch)) return `${path}/anyOf/${i}: must be a schema`;
      const issue = check(branch, `${path}/anyOf/${i}`, depth, counts);
      if (issue) return issue;
    }
  }
  for (const key of ['$defs', 'definitions']) {
    const defs = s[key];
    if (defs === undefined) continue;
    if (!isObject(defs)) return `${at}: ${key} must be an object`;
    for (const [name, def] of Object.entries(defs)) {
      if (!isObject(def)) return `${path}/${key}/${name}: must be a schema`;
      const issue = check(def, `${path}/${key}/${name}`, depth, counts);
      if (issue) return issue;
    }
  }
  return undefined;
}
