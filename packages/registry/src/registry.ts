import type { TSchema } from '@sinclair/typebox';
import MiniSearch from 'minisearch';
import { SchemaCompiler, closeObjects, formatErrors, plainSchema } from './schema.js';
import type { ValidateFunction, ValidationIssue } from './schema.js';
import { PatternWork, sizeBudget, unenforceablePatterns } from './linear-regexp.js';
import type { ToolScope } from './scope.js';
import { strictSchemaIssue } from './strict.js';
import { fromStrictArguments, toStrictSchema } from './strict-form.js';
import {
  DEFAULT_TIMEOUT_MS,
  TOOL_NAME,
  type AnyToolSpec,
  type Tool,
  type ToolSpec,
} from './tool.js';

export type ValidationResult =
  { ok: true; args: Record<string, unknown> } | { ok: false; issues: ValidationIssue[] };

/** A result checked against its tool's result schema (always ok for tools without one). */
export type ResultCheck = { ok: true } | { ok: false; issues: ValidationIssue[] };

export interface ListOptions {
  scope?: Pick<ToolScope, 'allows'>;
  /** Free-text query: ranks by relevance (fuzzy, prefix) and drops non-matches. */
  q?: string;
  category?: string;
  limit?: number;
}

export class RegistryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RegistryError';
  }
}

/** Describes every tool once; the gateway, the worker and every dialect read from it. */
export class ToolRegistry {
  private readonly ajv = new SchemaCompiler();
  /**
   * Results are checked on the worker for every call and can be large (a file listing, a
   * search): stopping at the first error keeps a badly wrong result as cheap as a right one.
   */
  private readonly resultAjv = new SchemaCompiler({ allErrors: false });
  /** For foreign schemas (upstream tools), made on first use. */
  private foreign: { args: SchemaCompiler; result: SchemaCompiler } | undefined;
  /** What one validation may spend on foreign patterns (validations are synchronous). */
  private readonly patternWork = new PatternWork();
  private readonly tools = new Map<string, Tool>();
  private readonly validators = new Map<string, ValidateFunction>();
  private readonly resultValidators = new Map<string, ValidateFunction>();
  private index:
    MiniSearch<{ id: string; name: string; description: string; category: string }> | undefined;
  private sorted: Tool[] | undefined;

  register<S extends TSchema, R>(spec: ToolSpec<S, R>): Tool {
    if (!TOOL_NAME.test(spec.name)) {
      throw new RegistryError(`tool name "${spec.name}" must match ${TOOL_NAME}`);
    }
    if (this.tools.has(spec.name))
      throw new RegistryError(`tool "${spec.name}" is already registered`);
    const parameters = closeObjects(plainSchema(spec.parameters));
    if (parameters.type !== 'object') {
      throw new RegistryError(`tool "${spec.name}": parameters must be an object schema`);
    }
    const compilers = spec.foreignSchemas
      ? (this.foreign ??= {
          args: new SchemaCompiler({ strict: false, work: this.patternWork }),
          result: new SchemaCompiler({ allErrors: false, strict: false, work: this.patternWork }),
        })
      : { args: this.ajv, result: this.resultAjv };
    // Foreign: a pattern RE2 cannot run, or past the tool's size budget, is left to the upstream
    // (and reported); ours (built-in, plugin, manifest): such a pattern is refused, naming it.
    const budget = spec.foreignSchemas ? sizeBudget() : undefined;
    const unenforced = [
      ...unenforceablePatterns(
        parameters,
        spec.foreignSchemas ? '/inputSchema' : '/parameters',
        budget,
      ),
      ...unenforceablePatterns(
        spec.result,
        spec.foreignSchemas ? '/outputSchema' : '/result',
        budget,
      ),
    ];
    const [bad] = unenforced;
    if (bad && !spec.foreignSchemas)
      throw new RegistryError(
        `tool "${spec.name}": the pattern ${JSON.stringify(bad.pattern)} at ${bad.path} cannot run in linear time: ${bad.reason}`,
      );
    let validate: ValidateFunction;
    let compiled: ReturnType<ToolRegistry['compileResult']>;
    this.patternWork.skip = new Set(unenforced.map((u) => u.pattern));
    try {
      try {
        validate = compilers.args.compile(parameters);
      } catch (err) {
        throw new RegistryError(`tool "${spec.name}": invalid schema: ${(err as Error).message}`);
      }
      compiled = this.compileResult(spec, compilers.result);
    } finally {
      this.patternWork.skip = new Set();
    }
    const { result, validateResult } = compiled;
    const strictForm = toStrictSchema(parameters);
    // The rewrite makes what it can; the check is what OpenAI takes (limits included).
    const strictIssue = strictForm.ok ? strictSchemaIssue(strictForm.schema) : strictForm.issue;
    const risk = spec.risk ?? 'safe';
    const tool: Tool = {
      name: spec.name,
      description: spec.description,
      parameters,
      category: spec.category,
      risk,
      requiresApproval: spec.requiresApproval ?? risk === 'destructive',
      sandbox: spec.sandbox,
      timeoutMs: spec.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      cacheTtlSeconds: spec.cacheTtlSeconds ?? 0,
      cacheScope: spec.cacheScope ?? 'global',
      idempotent: spec.idempotent ?? false,
      result,
      strict: strictIssue === undefined,
      strictParameters: strictForm.ok && strictIssue === undefined ? strictForm.schema : undefined,
      ...(strictIssue === undefined ? {} : { strictIssue }),
      ...(unenforced.length > 0 ? { unenforcedPatterns: unenforced } : {}),
      ...(spec.annotations ? { annotations: spec.annotations } : {}),
      precheck: spec.precheck as Tool['precheck'],
      ...(spec.describe ? { describe: spec.describe } : {}),
      handler: spec.handler as Tool['handler'],
    };
    this.tools.set(tool.name, tool);
    this.validators.set(tool.name, validate);
    if (validateResult) this.resultValidators.set(tool.name, validateResult);
    this.index = undefined;
    this.sorted = undefined;
    return tool;
  }

  /**
   * The declared result schema as plain JSON, compiled once. Not closed the way parameters
   * are: a result schema says what the tool returns, and only its author knows whether more
   * fields may come. Any schema: MCP wants an object `outputSchema`, and the MCP server wraps
   * a result of any other shape as `{"result": …}` (docs/tool-results.md).
   */
  private compileResult(
    spec: AnyToolSpec,
    compiler: SchemaCompiler,
  ): {
    result: Record<string, unknown> | undefined;
    validateResult: ValidateFunction | undefined;
  } {
    if (spec.result === undefined) return { result: undefined, validateResult: undefined };
    if (typeof spec.result !== 'object' || spec.result === null || Array.isArray(spec.result)) {
      throw new RegistryError(`tool "${spec.name}": result must be a JSON Schema object`);
    }
    const result = plainSchema(spec.result);
    try {
      return { result, validateResult: compiler.compile(result) };
    } catch (err) {
      throw new RegistryError(
        `tool "${spec.name}": invalid result schema: ${(err as Error).message}`,
      );
    }
  }

  /**
   * Removes a tool (an upstream's tool gone from its catalog): listings drop it at once, and a
   * call already queued for it ends `unknown_tool`. False when there was none.
   */
  unregister(name: string): boolean {
    const tool = this.tools.get(name);
    if (!tool || !this.tools.delete(name)) return false;
    if (this.foreign) {
      this.foreign.args.forget(tool.parameters);
      if (tool.result) this.foreign.result.forget(tool.result);
    }
    this.validators.delete(name);
    this.resultValidators.delete(name);
    this.index = undefined;
    this.sorted = undefined;
    return true;
  }

  registerAll(specs: readonly AnyToolSpec[]): void {
    for (const spec of specs) this.register(spec);
  }

  get(name: string): Tool | undefined {
    return this.tools.get(name);
  }

  get size(): number {
    return this.tools.size;
  }

  /**
   * Validates a call's arguments against the tool's full schema, after bringing them back
   * from the strict form a strict-mode model may have used (fromStrictArguments: `null` for
   * an optional property is absent, a map's `{key, value}` pairs are the object).
   */
  validate(name: string, args: unknown): ValidationResult {
    const tool = this.tools.get(name);
    const validate = this.validators.get(name);
    if (!tool || !validate) throw new RegistryError(`unknown tool "${name}"`);
    if (typeof args !== 'object' || args === null || Array.isArray(args)) {
      return {
        ok: false,
        issues: [
          { path: '/', message: 'must be object', keyword: 'type', params: { type: 'object' } },
        ],
      };
    }
    const cleaned = fromStrictArguments(tool.parameters, args as Record<string, unknown>);
    this.patternWork.reset();
    if (validate(cleaned)) return { ok: true, args: cleaned };
    return { ok: false, issues: formatErrors(validate.errors) };
  }

  /**
   * Checks a handler's result against the tool's result schema: the first mismatch only
   * (bounded whatever the result's size). Tools without a result schema always pass.
   */
  checkResult(name: string, result: unknown): ResultCheck {
    if (!this.tools.has(name)) throw new RegistryError(`unknown tool "${name}"`);
    const validate = this.resultValidators.get(name);
    this.patternWork.reset();
    if (!validate || validate(result)) return { ok: true };
    return { ok: false, issues: formatErrors(validate.errors) };
  }

  /**
   * Tools by name, or ranked by `q` (ties by name), filtered by scope and category. The order
   * never depends on registration or plugin load order: a listing that is byte-identical from
   * one gateway to the next keeps the providers' prompt caches warm.
   */
  list(options: ListOptions = {}): Tool[] {
    const { scope, category, q } = options;
    const keep = (t: Tool) => (!scope || scope.allows(t)) && (!category || t.category === category);
    let result: Tool[];
    if (q && q.trim()) {
      const hits = this.searchIndex().search(q, {
        prefix: true,
        fuzzy: 0.2,
        boost: { name: 3, category: 2 },
      });
      result = hits
        .sort((a, b) => b.score - a.score || byName(a.id as string, b.id as string))
        .map((h) => this.tools.get(h.id as string))
        .filter((t): t is Tool => !!t && keep(t));
    } else {
      result = this.nameOrder().filter(keep);
    }
    const limit = options.limit;
    if (limit !== undefined && limit >= 0) result = result.slice(0, limit);
    if (!scope || !result.some((t) => t.describe)) return result;
    // Tools described per client see everything this client may call, whatever the filters.
    const visible = this.nameOrder().filter((t) => scope.allows(t));
    return result.map((t) => (t.describe ? { ...t, description: t.describe(visible) } : t));
  }

  categories(): string[] {
    return [...new Set([...this.tools.values()].map((t) => t.category))].sort();
  }

  private nameOrder(): Tool[] {
    this.sorted ??= [...this.tools.values()].sort((a, b) => byName(a.name, b.name));
    return this.sorted;
  }

  private searchIndex() {
    if (!this.index) {
      this.index = new MiniSearch({
        fields: ['name', 'description', 'category'],
        // tool names are snake_case: index their words too
        tokenize: (text) => text.split(/[\s_\-.,;:!?()[\]{}"'/]+/).filter(Boolean),
      });
      // Indexed in name order: the scores' floating-point sums then come out the same
      // whatever order the tools were registered in.
      this.index.addAll(
        this.nameOrder().map((t) => ({
          id: t.name,
          name: t.name,
          description: t.description,
          category: t.category,
        })),
      );
    }
    return this.index;
  }
}

/** Code-unit order: the same on every machine, whatever its locale. */
function byName(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
