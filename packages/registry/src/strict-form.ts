/**
 * A tool's strict form: its parameter schema rewritten for OpenAI strict mode (Structured
 * Outputs), made once at registration and listed to models with `strict: true`; and the
 * inverse on arguments, which turns what a strict model sends into what the full schema
 * validates. The gateway always validates against the full schema, so whatever the strict
 * form leaves out is still enforced, and answered as a readable `invalid_arguments`.
 *
 * The rewrite (docs/dialects.md has the table):
 * - keywords strict mode lacks (`minLength`, bounds, `pattern`, `default`, …) leave the schema
 *   and are told in the description instead ("1 to 1000 characters", "default 30");
 * - optional properties become nullable and every property is listed in `required`: a strict
 *   model sends `null` for "absent", and `fromStrictArguments` drops it again;
 * - every object is closed (`additionalProperties: false`);
 * - a map (`Type.Record`: `patternProperties` or an `additionalProperties` schema) becomes a
 *   list of `{key, value}` pairs, which `fromStrictArguments` turns back into the object;
 * - `oneOf` becomes `anyOf` (the model may pick a value two branches take; the full schema
 *   refuses it).
 * What cannot be said this way (`allOf`, `not`, conditionals, tuples, a map with named
 * properties too, optional properties inside a union) leaves the tool without a strict form.
 */

type Json = Record<string, unknown>;

export type StrictForm = { ok: true; schema: Json } | { ok: false; issue: string };

/** The two properties of one map entry in the strict form. */
export const PAIR_KEY = 'key';
export const PAIR_VALUE = 'value';

/** Kept as they are. */
const KEPT = new Set(['type', 'enum', 'const', 'description', 'title']);
/** Annotations strict mode does not take and the model does not need. */
const DROPPED = new Set(['$schema', '$id', '$comment', 'readOnly', 'writeOnly', 'deprecated']);
/** Rebuilt by the rewrite itself. */
const REBUILT = new Set([
  'properties',
  'required',
  'additionalProperties',
  'patternProperties',
  'items',
  'anyOf',
  'oneOf',
  '$ref',
  '$defs',
  'definitions',
]);
/** Told in the description (constraintPhrases). */
const DESCRIBED = new Set([
  'minLength',
  'maxLength',
  'pattern',
  'format',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minItems',
  'maxItems',
  'uniqueItems',
  'minProperties',
  'maxProperties',
  'default',
  'examples',
]);

class Unqualified extends Error {
  constructor(
    readonly at: string,
    reason: string,
  ) {
    super(`${at || '/'}: ${reason}`);
    this.name = 'Unqualified';
  }
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The strict form of `parameters` (a closed, plain-JSON object schema), or why there is none. */
export function toStrictSchema(parameters: Json): StrictForm {
  try {
    const schema = rewrite(parameters, '', false);
    for (const key of ['$defs', 'definitions']) {
      const defs = parameters[key];
      if (defs === undefined) continue;
      if (!isObject(defs)) throw new Unqualified('', `${key} must be an object`);
      schema[key] = Object.fromEntries(
        Object.entries(defs).map(([name, def]) => [name, rewrite(def, `/${key}/${name}`, false)]),
      );
    }
    return { ok: true, schema };
  } catch (err) {
    if (err instanceof Unqualified) return { ok: false, issue: err.message };
    throw err;
  }
}

function rewrite(node: unknown, at: string, inUnion: boolean): Json {
  if (!isObject(node)) throw new Unqualified(at, 'a schema must be an object');
  for (const key of Object.keys(node)) {
    if (!KEPT.has(key) && !DROPPED.has(key) && !REBUILT.has(key) && !DESCRIBED.has(key))
      throw new Unqualified(at, `"${key}" cannot be expressed in strict mode`);
  }
  if (at !== '' && ('$defs' in node || 'definitions' in node))
    throw new Unqualified(at, 'definitions are only taken at the root');
  // Arguments are brought back from the strict form along properties, items and $refs; the
  // branch of a union a value took is not known then, so nothing inside a union may need it.
  if (inUnion && (isMap(node) || node.$ref !== undefined))
    throw new Unqualified(at, 'a map or a $ref inside anyOf/oneOf');
  if (isMap(node)) return mapAsPairs(node, at);

  const out: Json = {};
  for (const key of KEPT) if (node[key] !== undefined) out[key] = node[key];
  if (node.$ref !== undefined) {
    if (typeof node.$ref !== 'string' || !/^#\/(\$defs|definitions)\/[^/]+$/.test(node.$ref))
      throw new Unqualified(at, 'only a local $ref to #/$defs/<name> is taken');
    out.$ref = node.$ref;
  }
  const union = node.anyOf ?? node.oneOf;
  if (node.anyOf !== undefined && node.oneOf !== undefined)
    throw new Unqualified(at, 'anyOf and oneOf together');
  if (union !== undefined) {
    if (!Array.isArray(union) || union.length === 0)
      throw new Unqualified(at, 'a union must list its branches');
    out.anyOf = union.map((branch, i) => rewrite(branch, `${at}/anyOf/${i}`, true));
  }

  const types = typesOf(node);
  if (types.includes('object') || node.properties !== undefined) {
    if (node.properties !== undefined && !isObject(node.properties))
      throw new Unqualified(at, 'properties must be an object');
    const properties = (node.properties ?? {}) as Json;
    const required = new Set(Array.isArray(node.required) ? (node.required as unknown[]) : []);
    const strictProps: Json = {};
    for (const [name, prop] of Object.entries(properties)) {
      const strictProp = rewrite(prop, `${at}/properties/${name}`, inUnion);
      if (required.has(name) || acceptsNull(prop)) {
        strictProps[name] = strictProp;
        continue;
      }
      if (inUnion)
        throw new Unqualified(
          `${at}/properties/${name}`,
          'an optional property inside anyOf/oneOf cannot be made nullable',
        );
      strictProps[name] = nullable({
        ...strictProp,
        description: sentence(strictProp.description, 'Null to leave it out.'),
      });
    }
    if (!out.type && node.properties !== undefined) out.type = 'object';
    out.properties = strictProps;
    out.required = Object.keys(strictProps);
    out.additionalProperties = false;
  }
  if (node.items !== undefined) out.items = rewrite(node.items, `${at}/items`, inUnion);
  return describe(out, node);
}

/** An object schema that is a map: values under any key matching a pattern or a schema. */
function isMap(node: Json): boolean {
  const open = node.additionalProperties !== undefined && node.additionalProperties !== false;
  return node.patternProperties !== undefined || open;
}

/**
 * A map as a list of `{key, value}` pairs: strict mode has no object with free keys. The key's
 * pattern and the entry bounds go to the descriptions.
 */
function mapAsPairs(node: Json, at: string): Json {
  if (isObject(node.properties) && Object.keys(node.properties).length > 0)
    throw new Unqualified(at, 'a map with named properties too');
  let value: unknown;
  let pattern: string | undefined;
  if (node.patternProperties !== undefined) {
    const patterns = isObject(node.patternProperties) ? Object.entries(node.patternProperties) : [];
    if (patterns.length !== 1 || (node.additionalProperties ?? false) !== false)
      throw new Unqualified(at, 'a map must have one key pattern');
    [pattern, value] = patterns[0]!;
  } else {
    value = node.additionalProperties;
    if (value === true) throw new Unqualified(at, 'a map of values of any type');
  }
  // TypeBox's Type.Record(Type.String(), …) says "any key" as the pattern ^(.*)$.
  const anyKey = pattern === undefined || pattern === '^(.*)$' || pattern === '^.*$';
  const key: Json = {
    type: 'string',
    ...(anyKey ? {} : { description: `Matching the regular expression ${pattern}.` }),
  };
  const entries = describe(
    {
      type: 'array',
      ...(node.description === undefined ? {} : { description: node.description }),
      ...(node.title === undefined ? {} : { title: node.title }),
      items: {
        type: 'object',
        properties: { [PAIR_KEY]: key, [PAIR_VALUE]: rewrite(value, `${at}/value`, false) },
        required: [PAIR_KEY, PAIR_VALUE],
        additionalProperties: false,
      },
    },
    node,
  );
  const note = `Given as a list of {"${PAIR_KEY}", "${PAIR_VALUE}"} entries.`;
  entries.description = sentence(entries.description, note);
  return entries;
}

function typesOf(s: Json): unknown[] {
  return s.type === undefined ? [] : Array.isArray(s.type) ? s.type : [s.type];
}

/** Whether a schema takes null as it stands (then null is a value, not "absent"). */
export function acceptsNull(s: unknown): boolean {
  if (!isObject(s)) return false;
  if (typesOf(s).includes('null')) return true;
  if (s.const === null || (Array.isArray(s.enum) && s.enum.includes(null))) return true;
  for (const key of ['anyOf', 'oneOf']) {
    const list = s[key];
    if (Array.isArray(list) && list.some((x) => acceptsNull(x))) return true;
  }
  return false;
}

/** `s` or null: the form of an optional property in strict mode. */
function nullable(s: Json): Json {
  if (acceptsNull(s)) return s;
  if (Array.isArray(s.anyOf)) return { ...s, anyOf: [...s.anyOf, { type: 'null' }] };
  const withEnum = Array.isArray(s.enum) ? { enum: [...(s.enum as unknown[]), null] } : {};
  if (s.$ref === undefined && s.const === undefined && s.type !== undefined)
    return { ...s, type: [...typesOf(s), 'null'], ...withEnum };
  const { description, title, ...rest } = s;
  return {
    anyOf: [rest, { type: 'null' }],
    ...(description === undefined ? {} : { description }),
    ...(title === undefined ? {} : { title }),
  };
}

/** `out` with the constraints of `node` that strict mode lacks told in its description. */
function describe(out: Json, node: Json): Json {
  const phrases = constraintPhrases(node);
  if (phrases.length === 0) return out;
  const text = phrases.join(', ');
  return {
    ...out,
    description: sentence(
      typeof out.description === 'string' ? out.description : undefined,
      `${text.charAt(0).toUpperCase()}${text.slice(1)}.`,
    ),
  };
}

function sentence(base: unknown, more: string): string {
  const text = typeof base === 'string' ? base.trim() : '';
  if (text === '') return more;
  return /[.!?]$/.test(text) ? `${text} ${more}` : `${text}. ${more}`;
}

const json = (v: unknown) => JSON.stringify(v);

function range(min: unknown, max: unknown, unit: string, units: string): string | undefined {
  const n = (v: unknown) => (typeof v === 'number' ? v : undefined);
  const lo = n(min);
  const hi = n(max);
  const of = (k: number) => `${k} ${k === 1 ? unit : units}`;
  if (lo !== undefined && hi !== undefined) return lo === hi ? of(lo) : `${lo} to ${of(hi)}`;
  if (hi !== undefined) return `at most ${of(hi)}`;
  if (lo !== undefined)
    return lo === 1 && unit === 'character' ? 'not empty' : `at least ${of(lo)}`;
  return undefined;
}

/** What the model should know of the keywords the strict form leaves out, as short phrases. */
function constraintPhrases(s: Json): string[] {
  const out: string[] = [];
  const push = (p: string | undefined) => p !== undefined && out.push(p);
  push(range(s.minLength, s.maxLength, 'character', 'characters'));
  if (typeof s.pattern === 'string') push(`matching the regular expression ${s.pattern}`);
  if (typeof s.format === 'string') push(`format ${s.format}`);
  const lo = typeof s.minimum === 'number' ? s.minimum : undefined;
  const hi = typeof s.maximum === 'number' ? s.maximum : undefined;
  if (lo !== undefined && hi !== undefined) push(`from ${lo} to ${hi}`);
  else if (lo !== undefined) push(`at least ${lo}`);
  else if (hi !== undefined) push(`at most ${hi}`);
  if (typeof s.exclusiveMinimum === 'number') push(`greater than ${s.exclusiveMinimum}`);
  if (typeof s.exclusiveMaximum === 'number') push(`less than ${s.exclusiveMaximum}`);
  if (typeof s.multipleOf === 'number') push(`a multiple of ${s.multipleOf}`);
  push(range(s.minItems, s.maxItems, 'item', 'items'));
  if (s.uniqueItems === true) push('no duplicates');
  push(range(s.minProperties, s.maxProperties, 'entry', 'entries'));
  // A description that already says its default ("(default 30)") needs no second one.
  const described = typeof s.description === 'string' ? s.description : '';
  if (s.default !== undefined && !/\bdefault\b/i.test(described))
    push(`default ${json(s.default)}`);
  if (Array.isArray(s.examples) && s.examples.length > 0 && !/\be\.g\./i.test(described))
    push(`e.g. ${json(s.examples[0])}`);
  return out;
}

/**
 * Arguments as the full schema takes them, from arguments a strict-mode model sent: `null`
 * for an optional property that does not take null means "absent" and is dropped, and a map
 * sent as `{key, value}` pairs becomes the object (pairs naming one key twice are left as they
 * are, for validation to refuse). At every level the schema reaches through properties, items,
 * map values and local `$ref`s. Copy on write: arguments with nothing to change come back as
 * the same object.
 */
export function fromStrictArguments(parameters: Json, args: Json): Json {
  return normalise(parameters, args, parameters, 0) as Json;
}

/** Deeper than any schema the strict form takes (10 levels), and a stop for recursive refs. */
const MAX_WALK_DEPTH = 64;

function normalise(node: unknown, value: unknown, root: Json, depth: number): unknown {
  const s = resolve(node, root);
  if (!s || depth > MAX_WALK_DEPTH) return value;
  const named = isObject(s.properties) && Object.keys(s.properties).length > 0;
  if (!named && isMap(s)) {
    const object = Array.isArray(value) ? pairsToObject(value) : value;
    if (!isObject(object)) return value;
    const valueSchema = isObject(s.patternProperties)
      ? Object.values(s.patternProperties)[0]
      : s.additionalProperties;
    let out: Json | undefined;
    for (const [key, v] of Object.entries(object)) {
      const n = normalise(valueSchema, v, root, depth + 1);
      if (n !== v) (out ??= { ...object })[key] = n;
    }
    return out ?? object;
  }
  if (isObject(value) && isObject(s.properties)) {
    const props = s.properties;
    const required = new Set(Array.isArray(s.required) ? (s.required as unknown[]) : []);
    let out: Json | undefined;
    for (const [key, v] of Object.entries(value)) {
      if (!Object.hasOwn(props, key)) continue;
      const prop = props[key];
      if (v === null && !required.has(key) && !acceptsNull(resolve(prop, root))) {
        out ??= { ...value };
        delete out[key];
        continue;
      }
      const n = normalise(prop, v, root, depth + 1);
      if (n !== v) (out ??= { ...value })[key] = n;
    }
    return out ?? value;
  }
  if (Array.isArray(value) && isObject(s.items)) {
    let out: unknown[] | undefined;
    value.forEach((v, i) => {
      const n = normalise(s.items, v, root, depth + 1);
      if (n !== v) (out ??= [...value])[i] = n;
    });
    return out ?? value;
  }
  return value;
}

/** `[{key, value}, …]` as an object, or undefined when it is not exactly that. */
function pairsToObject(list: unknown[]): Json | undefined {
  const out: Json = {};
  for (const entry of list) {
    if (!isObject(entry) || Object.keys(entry).length !== 2) return undefined;
    const key = entry[PAIR_KEY];
    if (typeof key !== 'string' || !(PAIR_VALUE in entry) || Object.hasOwn(out, key))
      return undefined;
    // defineProperty: a key such as "__proto__" is an ordinary property here, as in JSON.parse.
    Object.defineProperty(out, key, {
      value: entry[PAIR_VALUE],
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

/** A schema, following local `$ref`s (a few hops at most). */
function resolve(node: unknown, root: Json): Json | undefined {
  let s = node;
  for (let hops = 0; hops < 8 && isObject(s) && typeof s.$ref === 'string'; hops++) {
    const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(s.$ref);
    const defs = m ? root[m[1]!] : undefined;
    s = m && isObject(defs) ? defs[m[2]!] : undefined;
  }
  return isObject(s) ? s : undefined;
}
