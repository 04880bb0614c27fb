import type { Static, TSchema } from '@sinclair/typebox';
import type { CallMeter } from './call-meter.js';
import { ToolError } from './errors.js';
import type { UnenforcedPattern } from './linear-regexp.js';

export type Risk = 'safe' | 'sensitive' | 'destructive';

/**
 * What a worker hands every tool handler. Packages that need more (the sandbox, Redis, the
 * HTTP policy) add fields by augmenting `ToolServices`.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface ToolServices {}

/**
 * What a running tool tells the caller before it ends (GET /v1/calls/{id}/events, MCP progress
 * notifications). Calls are fire-and-forget: the worker bounds and batches what it forwards.
 */
export interface ToolEvents {
  /** A chunk of live output (sandboxed tools: the program's stdout or stderr as it comes). */
  output(stream: 'stdout' | 'stderr', text: string): void;
  /** How far along the tool is: `progress` of `total` (omit total when unknown). */
  progress(progress: number, total?: number, message?: string): void;
}

/**
 * Where a request goes, as a credential rule binds it: the scheme, the host as a URL writes it
 * (lower case, IPv6 in brackets) and the port, always explicit (443, not "").
 */
export interface RequestOrigin {
  scheme: 'http' | 'https';
  host: string;
  port: number;
}

/**
 * The operator's credential rules as one call sees them (docs/credentials.md): headers with
 * secret values for the origins that have a rule. Values are read and decrypted at use, in the
 * worker, and what a call used is redacted from its outcome.
 */
export interface CallCredentials {
  /** Whether a rule names `origin` (nothing is read). */
  covers(origin: RequestOrigin): boolean;
  /**
   * The headers the rules add for a request to `origin` ([] when none). A ToolError
   * `credential_missing` when a rule names a secret that is not set.
   */
  headersFor(origin: RequestOrigin): Promise<[string, string][]>;
}

export interface ToolContext {
  callId: string;
  clientId: string;
  /** The user the call acts for, where one is known. */
  user?: string;
  /** The OAuth token's scopes the call was made with (code mode hands them to its script). */
  scopes?: readonly string[];
  /** The token's groups the call was made with (code mode hands them to its script). */
  groups?: readonly string[];
  /** Credential rules for this call's requests (absent: none configured). */
  credentials?: CallCredentials;
  /**
   * Whose workspace and memory the call uses when not its client's: one user's
   * (`<client>@<user>`, under the client's `isolation: user`). Read it through `spaceOf`.
   */
  space?: string;
  /** Aborted when the tool's timeout passes, the call is cancelled or the worker shuts down. */
  signal: AbortSignal;
  services: ToolServices;
  /** Live output and progress; absent where nobody listens (unit tests). */
  events?: ToolEvents;
  /**
   * Where the tool reports what the worker cannot see itself: a network-enabled sandbox's
   * egress bytes (absent outside a worker).
   */
  meter?: CallMeter;
}

/** Whose workspace and memory a call uses: its user's under `isolation: user`, else its client's. */
export function spaceOf(ctx: Pick<ToolContext, 'clientId' | 'space'>): string {
  return ctx.space ?? ctx.clientId;
}

/**
 * What a tool's precheck sees: who calls, and the services of the process running it (the
 * policy settings both the gateway and the worker have, e.g. `shellPolicy`).
 */
export interface PrecheckContext {
  clientId: string;
  /** Partial: the gateway has only the policy settings, never the sandbox or the stores. */
  services: Partial<ToolServices>;
}

/** Where a sandboxed tool runs; `image` names a sandbox image key (e.g. "python"). */
export interface SandboxNeeds {
  image: string;
  /** The sandbox may reach the network (manifest `network: true`): MCP's openWorldHint. */
  network?: boolean;
}

export interface ToolSpec<
  S extends TSchema = TSchema,
  R = unknown,
  O extends TSchema | undefined = TSchema | undefined,
> {
  name: string;
  description: string;
  parameters: S;
  category: string;
  risk?: Risk;
  /** Defaults to true for destructive tools. */
  requiresApproval?: boolean;
  /** Set for tools that run in a throwaway container; they use the sandbox queue. */
  sandbox?: SandboxNeeds;
  timeoutMs?: number;
  /** 0 = not cacheable. */
  cacheTtlSeconds?: number;
  /** Cache key includes the client for tools that touch client data. */
  cacheScope?: 'global' | 'client';
  /** Safe to run again if a worker dies mid-call. */
  idempotent?: boolean;
  /**
   * The schemas come from elsewhere (an upstream MCP server): keywords Ajv does not know are
   * ignored rather than refused, as JSON Schema says, where our own tools are held to strict.
   */
  foreignSchemas?: boolean;
  /** MCP annotations given by the tool's origin (an upstream), shown as they are. */
  annotations?: Record<string, unknown>;
  /**
   * JSON Schema of the handler's result (MCP `outputSchema`, `structuredContent`). An object
   * schema goes to MCP as it is; any other (a number, a string, an array) is wrapped as
   * `{"result": …}` there, as FastMCP does. With defineTool, the handler must return its
   * static type (docs/tool-results.md).
   */
  result?: O;
  /**
   * The tool's own policy on its (already validated) arguments: throw a ToolError to refuse
   * them. Runs on the gateway before the call is queued (the refusal is an error outcome the
   * model reads) and again in the worker before the handler. Synchronous and bounded: it runs
   * on the gateway's event loop (docs/policy-budgets.md).
   */
  precheck?: (args: Static<S>, ctx: PrecheckContext) => void;
  /**
   * The description one client's listing shows, made from the tools that client may call
   * (`visible`): for tools whose use depends on the others (run_code_with_tools). Bounded by
   * the tool; `description` stays what search and unscoped listings read.
   */
  describe?: (visible: readonly Tool[]) => string;
  handler: (args: Static<S>, ctx: ToolContext) => Promise<R> | R;
}

/** Any tool spec, whatever its schema: for lists of heterogeneous tools. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyToolSpec = ToolSpec<any, unknown>;

/** A registered tool: every optional field resolved. */
export interface Tool {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  category: string;
  risk: Risk;
  requiresApproval: boolean;
  sandbox: SandboxNeeds | undefined;
  timeoutMs: number;
  cacheTtlSeconds: number;
  cacheScope: 'global' | 'client';
  idempotent: boolean;
  /** The result's JSON Schema, when the tool declares one. */
  result: Record<string, unknown> | undefined;
  /**
   * Whether the tool has a strict form for OpenAI strict mode (made at registration, see
   * strict-form.ts): only then do listings offer `strict: true`, with `strictParameters`.
   */
  strict: boolean;
  /**
   * `parameters` as strict mode takes them: constraints told in descriptions, optional
   * properties nullable and required, maps as `{key, value}` lists. For the model only: calls
   * are validated against `parameters`.
   */
  strictParameters: Record<string, unknown> | undefined;
  /** Why the tool has no strict form (a plugin author's hint), when it has none. */
  strictIssue?: string;
  /**
   * Patterns of a foreign schema (an upstream's) toolgate does not check, and why: RE2 cannot
   * run them, or they pass the tool's budget (linear-regexp.ts). The upstream checks them.
   */
  unenforcedPatterns?: UnenforcedPattern[];
  /** MCP annotations from the tool's origin (upstream tools), when it gave some. */
  annotations?: Record<string, unknown>;
  precheck: ((args: unknown, ctx: PrecheckContext) => void) | undefined;
  describe?: (visible: readonly Tool[]) => string;
  handler: (args: unknown, ctx: ToolContext) => Promise<unknown> | unknown;
}

export const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
export const DEFAULT_TIMEOUT_MS = 30_000;

/** Read-only all the way down: a handler may return readonly arrays where the schema says array. */
type DeepReadonly<T> = T extends (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends object
    ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
    : T;

/**
 * What a handler may return for the result schema `O`: its static type (arrays may be readonly),
 * or anything when the tool declares no result schema.
 */
export type HandlerResult<O extends TSchema | undefined> = [O] extends [TSchema]
  ? DeepReadonly<Static<O>>
  : unknown;

/**
 * Identity helper that ties the handler's types to the schemas: its arguments come from
 * `parameters` and, when the tool declares a `result` schema, it must return that schema's
 * static type (a compile-time error otherwise). `R` is `const` so a returned literal such as
 * `encoding: 'utf-8'` keeps its literal type against a schema's `Type.Literal` union (a
 * generic return type would widen it to string).
 */
export function defineTool<
  S extends TSchema,
  const R extends HandlerResult<O>,
  O extends TSchema | undefined = undefined,
>(spec: ToolSpec<S, R, O>): ToolSpec<S, R, O> {
  return spec;
}

/**
 * Runs a tool's precheck: undefined when the arguments pass, else the ToolError that refuses
 * them (a precheck that fails any other way refuses too, as `tool_error`).
 */
export function runPrecheck(
  tool: Tool,
  args: unknown,
  ctx: PrecheckContext,
): ToolError | undefined {
  if (!tool.precheck) return undefined;
  try {
    tool.precheck(args, ctx);
    return undefined;
  } catch (err) {
    if (err instanceof ToolError) return err;
    const message = err instanceof Error ? err.message : String(err);
    return new ToolError('tool_error', `${tool.name} could not check its arguments: ${message}`);
  }
}
