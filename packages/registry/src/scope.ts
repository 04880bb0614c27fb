import type { Tool } from './tool.js';

/**
 * A client's tool scope: tool names, `category:<name>`, or `*`. Compiled once per client.
 */
export class ToolScope {
  private readonly all: boolean;
  private readonly names: Set<string>;
  private readonly categories: Set<string>;

  constructor(patterns: readonly string[]) {
    this.all = patterns.includes('*');
    this.names = new Set(patterns.filter((p) => !p.startsWith('category:')));
    this.categories = new Set(
      patterns.filter((p) => p.startsWith('category:')).map((p) => p.slice('category:'.length)),
    );
  }

  allows(tool: Pick<Tool, 'name' | 'category'>): boolean {
    return this.all || this.names.has(tool.name) || this.categories.has(tool.category);
  }
}
