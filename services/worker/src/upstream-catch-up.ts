/**
 * A call for an upstream tool this worker does not serve yet. Every process applies upstream
 * catalogs and pins on its own look at Redis, once a second; the gateway that took an approval
 * applies it at once. A call that gateway accepted in that second names a tool its worker still
 * lacks: rather than answer `unknown_tool`, the worker looks at that upstream once, now.
 */
import { upstreamToolName } from '@toolgate/config';
import type { Tool, ToolRegistry } from '@toolgate/registry';
import type { UpstreamCatalog } from '@toolgate/upstreams';

/**
 * Longest wait for that look (a refresh that falls due reads the upstream itself); the look
 * goes on after it, as the next poll would.
 */
export const CATCH_UP_MS = 5000;

/**
 * `name` as the registry has it once the upstreams whose tools `name` could be were looked at
 * (catalog and pins re-read, applied); undefined when it names no upstream's tool or is still
 * not served (not approved, left out, gone).
 */
export async function catchUpUpstreamTool(
  catalog: UpstreamCatalog | undefined,
  upstreams: readonly { id: string }[],
  registry: ToolRegistry,
  name: string,
): Promise<Tool | undefined> {
  if (!catalog) return undefined;
  const owners = upstreams.filter((u) => name.startsWith(upstreamToolName(u.id, '')));
  if (owners.length === 0) return undefined;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all(owners.map((u) => catalog.syncNow(u.id).catch(() => undefined))),
    new Promise((resolve) => (timer = setTimeout(resolve, CATCH_UP_MS))),
  ]);
  clearTimeout(timer);
  return registry.get(name);
}
