/** @toolgate/plugins: discovers plugins at start (docs/spec.md §8) and scaffolds new ones. */
export { definePlugin, defineTool, ToolError, Type } from './plugin.js';
export { loadPlugins, PLUGIN_FILES } from './load.js';
export { loadExtensions } from './extensions.js';
export { loadToolRegistry } from './registry.js';
export { scaffoldPlugin, ScaffoldError, PLUGIN_NAME } from './scaffold.js';

export type { HandlerResult, Static, TObject, TSchema } from '@toolgate/registry';
export type {
  PluginContext,
  PluginDefinition,
  PluginExport,
  PluginFactory,
  PluginLogger,
} from './plugin.js';
export type { FailedPlugin, LoadedPlugin, LoadOptions, LoadResult } from './load.js';
export type { ExtensionOptions, ExtensionsResult } from './extensions.js';
export type { ScaffoldOptions } from './scaffold.js';
