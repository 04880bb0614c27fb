import type { Static, TSchema } from '@sinclair/typebox';

export type Risk = 'safe' | 'sensitive' | 'destructive';

/**
 * What a worker hands every tool handler. Packages that need more (the sandbox, Redis, the
 * HTTP policy) add fields by augmenting `ToolServices`.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface ToolServices {}

export interface ToolContext {
  callId: string;
  clientId: string;
  /** Aborted when the tool's timeout passes or the worker shuts down. */
  signal: AbortSignal;
  services: ToolServices;
}

/** Where a sandboxed tool runs; `image` names a sandbox image key (e.g. "python"). */
export interface SandboxNeeds {
  image: string;
}

export interface ToolSpec<S extends TSchema = TSchema, R = unknown> {
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
  handler: (args: unknown, ctx: ToolContext) => Promise<unknown> | unknown;
}

export const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
export const DEFAULT_TIMEOUT_MS = 30_000;

/** Identity helper that ties the handler's argument type to the schema. */
export function defineTool<S extends TSchema, R>(spec: ToolSpec<S, R>): ToolSpec<S, R> {
  return spec;
}
