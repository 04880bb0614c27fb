/**
 * Whether a schema is one OpenAI strict mode (Structured Outputs) takes: the check a tool's
 * strict form (strict-form.ts) must pass before a listing offers it with `strict: true`. A
 * schema OpenAI would reject fails the model's whole request, so a tool whose strict form
 * fails here is listed without `strict`.
 *
 * Conservative on purpose in the keywords. The ones strict mode accepts have changed over time
 * (string `pattern`/`format`, number bounds and array `minItems`/`maxItems` arrived late and
 * not for every model; `minLength`/`maxLength`, `default` and the rest never did), so this is
 * an allow-list of what every strict-capable model accepts; the strict form tells the others
 * in descriptions. The size limits are OpenAI's published ones (docs/dialects.md).
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
  /** Levels of nesting below the root object (through properties, items and anyOf). */
  depth: 10,
  /** Object properties, all levels together. */
  properties: 5000,
  /** Enum values, all enums together. */
  enumValues: 1000,
  /** Characters of every property name, definition name, enum value and const value together. */
  nameChars: 120_000,
  /** One string enum of more than this many values… */
  largeEnumValues: 250,
  /** …may hold at most this many characters in all. */
  largeEnumChars: 15_000,
} as const;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

interface Counts {
  properties: number;
  enumValues: number;
  nameChars: number;
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
  const counts: Counts = { properties: 0, enumValues: 0, nameChars: 0 };
  const issue = check(schema, '', 0, counts);
  if (issue) return issue;
  if (counts.properties > STRICT_LIMITS.properties)
    return `more than ${STRICT_LIMITS.properties} properties in all`;
  if (counts.enumValues > STRICT_LIMITS.enumValues)
    return `more than ${STRICT_LIMITS.enumValues} enum values in all`;
  if (counts.nameChars > STRICT_LIMITS.nameChars)
    return `more than ${STRICT_LIMITS.nameChars} characters of names, enum and const values in all`;
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
  if (
    s.type === undefined &&
    s.enum === undefined &&
    s.const === undefined &&
    s.anyOf === undefined &&
    s.$ref === undefined
  )
    return `${at}: a schema must say its type (type, enum, const, anyOf or $ref)`;
  if (s.enum !== undefined) {
    if (!Array.isArray(s.enum) || s.enum.length === 0)
      return `${at}: enum must be a non-empty array`;
    counts.enumValues += s.enum.length;
    const chars = s.enum.reduce((n: number, v) => n + valueChars(v), 0);
    counts.nameChars += chars;
    const strings = s.enum.filter((v) => typeof v === 'string').length;
    if (strings > STRICT_LIMITS.largeEnumValues && chars > STRICT_LIMITS.largeEnumChars)
      return `${at}: an enum of more than ${STRICT_LIMITS.largeEnumValues} strings holds more than ${STRICT_LIMITS.largeEnumChars} characters`;
  }
  if (s.const !== undefined) counts.nameChars += valueChars(s.const);

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
    for (const name of names) counts.nameChars += name.length;
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
      counts.nameChars += name.length;
      const issue = check(def, `${path}/${key}/${name}`, depth, counts);
      if (issue) return issue;
    }
  }
  return undefined;
}

/** What an enum or const value counts towards the name quota: its text. */
function valueChars(v: unknown): number {
  return typeof v === 'string' ? v.length : v === null ? 0 : String(v).length;
}
