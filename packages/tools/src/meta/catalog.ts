/**
 * The registry as one client sees it, for find_tools. The worker knows the clients from the
 * same config the gateway reads, so it can apply each client's scope itself: find_tools never
 * tells a model about a tool its client may not call.
 */
import { ToolScope, type Tool, type ToolRegistry } from '@toolgate/registry';

export interface ToolMatch {
  name: string;
  description: string;
  category: string;
  /** JSON Schema of the arguments, as /tools lists it. */
  parameters: Record<string, unknown>;
}

export interface ToolCatalog {
  /** The client's tools ranked for `query` (fuzzy, prefix), best first; none for unknown clients. */
  search(clientId: string, query: string, limit: number): ToolMatch[];
}

/** What the catalog needs of each configured client (config.clients fits). */
export interface ClientScope {
  id: string;
  tools: readonly string[];
}

const ALL = new ToolScope(['*']);
const NONE = new ToolScope([]);

/**
 * With no clients configured the gateway runs in development mode and admits only its own
 * admin client, scoped to every tool: the catalog then shows every tool to every caller.
 */
export function createToolCatalog(
  registry: ToolRegistry,
  clients: readonly ClientScope[],
  options: { exclude?: readonly string[] } = {},
): ToolCatalog {
  const scopes = new Map(clients.map((c) => [c.id, new ToolScope(c.tools)]));
  const exclude = new Set(options.exclude ?? ['find_tools']);
  const scopeOf = (clientId: string) =>
    clients.length === 0 ? ALL : (scopes.get(clientId) ?? NONE);
  return {
    search(clientId, query, limit) {
      return registry
        .list({ q: query, scope: scopeOf(clientId), limit: limit + exclude.size })
        .filter((t) => !exclude.has(t.name))
        .slice(0, limit)
        .map(toMatch);
    },
  };
}

function toMatch(tool: Tool): ToolMatch {
  return {
    name: tool.name,
    description: tool.description,
    category: tool.category,
    parameters: tool.parameters,
  };
}
