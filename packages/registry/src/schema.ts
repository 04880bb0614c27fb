import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { foreignRegExp, linearRegExp, type PatternWork } from './linear-regexp.js';

// ajv-formats ships CJS with a default export; NodeNext sees the module object.
const addFormats = addFormatsModule as unknown as (ajv: Ajv | Ajv2020) => Ajv;

/** The `$schema` of JSON Schema 2020-12 (MCP's default dialect for tool schemas). */
export const DRAFT_2020_12 = 'https://json-schema.org/draft/2020-12/schema';

/**
 * Strict argument validation: unknown properties rejected, no type coercion, every error
 * reported. One Ajv instance per registry; validators compiled once at registration. Every
 * `pattern` runs on RE2 in linear time (linear-regexp.ts): our own schemas must have only
 * patterns it can run; a foreign schema's (an upstream's) others are left to the upstream,
 * and its checks stop at FOREIGN_PATTERN_LIMITS.
 */
export function createAjv(options: CompilerOptions = {}): Ajv {
  const ajv = new Ajv(ajvOptions(options));
  addFormats(ajv);
  return ajv;
}

export interface CompilerOptions {
  allErrors?: boolean;
  /** Not strict means foreign (an upstream's schema): unknown keywords ignored. */
  strict?: boolean;
  /** The budget of a foreign schema's patterns; given only with `strict: false`. */
  work?: PatternWork;
}

function ajvOptions(options: CompilerOptions) {
  return {
    strict: options.strict ?? true,
    code: { regExp: options.work ? foreignRegExp(options.work) : linearRegExp },
    allErrors: options.allErrors ?? true,
    coerceTypes: false,
    useDefaults: false,
    removeAdditional: false,
  };
}

/**
 * Compiles a schema in its own dialect: draft-07 (TypeBox's, and Ajv's default) unless the
 * schema declares JSON Schema 2020-12 with `$schema` (`$defs`, `prefixItems`, … as MCP
 * clients send them). The 2020-12 compiler is made on first use.
 */
export class SchemaCompiler {
  private readonly draft07: Ajv;
  private draft2020: Ajv2020 | undefined;

  constructor(private readonly options: CompilerOptions = {}) {
    this.draft07 = createAjv(options);
  }

  compile(schema: Record<string, unknown>): ValidateFunction {
    if (schema.$schema !== DRAFT_2020_12) return this.draft07.compile(schema);
    if (!this.draft2020) {
      this.draft2020 = new Ajv2020(ajvOptions(this.options));
      addFormats(this.draft2020);
    }
    return this.draft2020.compile(schema);
  }

  /** Drops a compiled schema from Ajv's cache (a tool replaced at run time must not pile up). */
  forget(schema: Record<string, unknown>): void {
    this.draft07.removeSchema(schema);
    this.draft2020?.removeSchema(schema);
  }
}

export type { ValidateFunction };

export interface ValidationIssue {
  path: string;
  message: string;
  keyword: string;
  params: Record<string, unknown>;
}

/**
 * Issues reported per call. With allErrors, 10 000 unknown keys are 10 000 issues — a 1.3 MB
 * error body built and sent for one request; the first few say what is wrong.
 */
export const MAX_ISSUES = 20;

export function formatErrors(errors: ErrorObject[] | null | undefined): ValidationIssue[] {
  return (errors ?? []).slice(0, MAX_ISSUES).map((e) => ({
    path: e.instancePath || '/',
    message: e.message ?? 'is invalid',
    keyword: e.keyword,
    params: e.params as Record<string, unknown>,
  }));
}

type Json = Record<string, unknown>;

/** A plain-JSON deep copy (drops TypeBox's symbol keys). */
export function plainSchema(schema: unknown): Json {
  return JSON.parse(JSON.stringify(schema)) as Json;
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Visits every sub-schema of a JSON Schema (properties, items, combinators, defs). */
function eachSubschema(schema: Json, visit: (s: Json) => void): void {
  visit(schema);
  for (const key of ['properties', 'patternProperties', '$defs', 'definitions']) {
    const m = schema[key];
    if (isObject(m)) for (const s of Object.values(m)) if (isObject(s)) eachSubschema(s, visit);
  }
  for (const key of ['items', 'additionalProperties', 'not', 'if', 'then', 'else', 'contains']) {
    const s = schema[key];
    if (isObject(s)) eachSubschema(s, visit);
  }
  for (const key of ['anyOf', 'oneOf', 'allOf', 'prefixItems']) {
    const list = schema[key];
    if (Array.isArray(list)) for (const s of list) if (isObject(s)) eachSubschema(s, visit);
  }
}

/** Closes every object schema that does not say otherwise: unknown properties are errors. */
export function closeObjects(schema: Json): Json {
  const copy = plainSchema(schema);
  eachSubschema(copy, (s) => {
    if ((s.type === 'object' || isObject(s.properties)) && s.additionalProperties === undefined) {
      s.additionalProperties = false;
    }
  });
  return copy;
}
