import type { ToolRegistry } from '@toolgate/registry';
import { createToolRegistry } from '@toolgate/tools';
import { loadExtensions } from './extensions.js';
import type { PluginLogger } from './plugin.js';

/**
 * The registry both services build at start: the built-in tools plus every plugin and tool
 * manifest found in `dirs`. Gateway and worker must build it the same way, or they would
 * disagree about which tools exist.
 */
export async function loadToolRegistry(
  dirs: readonly string[],
  logger: PluginLogger,
): Promise<ToolRegistry> {
  const reserved = createToolRegistry()
    .list()
    .map((t) => t.name);
  const extensions = await loadExtensions(dirs, logger, { reserved });
  return createToolRegistry(extensions.tools);
}
