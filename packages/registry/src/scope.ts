import type { Tool } from './tool.js';

/**
 * A client's tool scope: tool names, `category:<name>`, `<prefix>*` (every tool whose name
 * starts so, as plain text: `github__*`, an upstream's tools), or `*`. Compiled once per
 * client. A prefix knows nothing of upstreams: the config refuses upstream ids a prefix would
 * reach without naming them (`file_*` beside upstream `file`; docs/upstreams.md, naming).
 */
export class ToolScope {
  private readonly all: boolean;
  private readonly names: Set<string>;
  private readonly categories: Set<string>;
  private readonly prefixes: string[];

  constructor(patterns: readonly string[]) {
    this.all = patterns.includes('*');
    this.names = new Set(patterns.filter((p) => !p.startsWith('category:') && !p.endsWith('*')));
    this.prefixes = patterns
      .filter((p) => p.length > 1 && p.endsWith('*') && !p.startsWith('category:'))
      .map((p) => p.slice(0, -1));
    this.categories = new Set(
      patterns.filter((p) => p.startsWith('category:')).map((p) => p.slice('category:'.length)),
    );
  }

  allows(tool: Pick<Tool, 'name' | 'category'>): boolean {
    return (
      this.all ||
      this.names.has(tool.name) ||
      this.categories.has(tool.category) ||
      this.prefixes.some((p) => tool.name.startsWith(p))
    );
  }
}
