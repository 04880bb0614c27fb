/** What a plugin module default-exports, and the helper that types it. */
import { ToolError, Type, defineTool, type AnyToolSpec } from '@toolgate/registry';

/** pino-compatible; plugins and the loader never log through console. */
export interface PluginLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface PluginDefinition {
  /** Shown in logs and in the loader's report; usually the folder name. */
  name: string;
  tools: AnyToolSpec[];
}

/**
 * Handed to a plugin that exports a function. Plugins are plain `.mjs` files that may live
 * outside the workspace, where `@toolgate/*` packages do not resolve: everything a plugin
 * needs from toolgate arrives here.
 */
export interface PluginContext {
  /** The plugin's own folder (absolute). */
  dir: string;
  /** The process environment, read when the plugin loads (never at import time). */
  env: Readonly<Record<string, string | undefined>>;
  logger: PluginLogger;
  /** Throw `new ToolError(code, message)` from a handler for an error the model can read. */
  ToolError: typeof ToolError;
  /** TypeBox, for schemas (plain JSON Schema objects work as well). */
  Type: typeof Type;
}

export type PluginFactory = (ctx: PluginContext) => PluginDefinition | Promise<PluginDefinition>;

export type PluginExport = PluginDefinition | PluginFactory;

/** Identity helper: types a plugin's default export (an object, or a function returning one). */
export function definePlugin<P extends PluginExport>(plugin: P): P {
  return plugin;
}

/** For plugins written in TypeScript: schemas type the handler's arguments and result. */
export { ToolError, Type, defineTool };
