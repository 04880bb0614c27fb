/**
 * Everything the plugins directories hold, in one call for the services' main.ts: code
 * plugins (`plugin.mjs`) and declarative sandboxed tools (`tool.yaml`). Plugins load first;
 * a manifest whose tool name a plugin took is skipped like any other duplicate.
 */
import { loadManifestTools } from '@toolgate/manifest-tools';
import { loadPlugins, type LoadOptions, type LoadResult } from './load.js';
import type { PluginLogger } from './plugin.js';

export interface ExtensionOptions extends LoadOptions {
  /** Sandbox image keys that exist (worker: Object.keys(sandbox.config.images)). */
  images?: readonly string[];
}

export interface ExtensionsResult extends LoadResult {
  /** Which kind each loaded entry is, by folder. */
  kinds: Record<string, 'plugin' | 'manifest'>;
}

export async function loadExtensions(
  dirs: readonly string[],
  logger: PluginLogger,
  options: ExtensionOptions = {},
): Promise<ExtensionsResult> {
  const plugins = await loadPlugins(dirs, logger, options);
  const manifests = await loadManifestTools(dirs, logger, {
    reserved: [...(options.reserved ?? []), ...plugins.tools.map((t) => t.name)],
    ...(options.images ? { images: options.images } : {}),
  });
  return {
    tools: [...plugins.tools, ...manifests.tools],
    loaded: [
      ...plugins.loaded,
      ...manifests.loaded.map((m) => ({ name: m.name, dir: m.dir, tools: [m.name] })),
    ],
    failed: [...plugins.failed, ...manifests.failed],
    kinds: Object.fromEntries([
      ...plugins.loaded.map((p) => [p.dir, 'plugin'] as const),
      ...manifests.loaded.map((m) => [m.dir, 'manifest'] as const),
    ]),
  };
}
