import { describe, expect, it } from 'vitest';
import { ToolRegistry } from './registry.js';
import type { AnyToolSpec } from './tool.js';

/** A tool whose schema came from elsewhere (an upstream MCP server). */
function foreign(name: string, properties: Record<string, unknown>): AnyToolSpec {
  return {
    name,
    description: 'from an upstream',
    category: 'upstream:x',
    parameters: { type: 'object', properties } as unknown as AnyToolSpec['parameters'],
    foreignSchemas: true,
    handler: () => null,
  };
}

describe('foreign schemas (upstream tools)', () => {
  it('ignores keywords Ajv does not know, where our own tools are refused', () => {
    const registry = new ToolRegistry();
    registry.register(foreign('a', { q: { type: 'string', 'x-widget': 'search' } }));
    expect(registry.validate('a', { q: 'x' })).toMatchObject({ ok: true });
    expect(() =>
      registry.register({
        ...foreign('b', { q: { type: 'string', 'x-widget': 'x' } }),
        foreignSchemas: false,
      }),
    ).toThrow(/invalid schema/);
  });

  it("never runs a pattern that can backtrack badly on a model's argument", () => {
    const registry = new ToolRegistry();
    registry.register(
      foreign('evil', {
        q: { type: 'string', pattern: '^(a+)+$' },
        r: { type: 'string', pattern: '^[a-z]+$' },
      }),
    );
    const started = performance.now();
    // `^(a+)+$` on 40 a's and a b would take hours; it is left to the upstream
    expect(registry.validate('evil', { q: `${'a'.repeat(40)}b` })).toMatchObject({ ok: true });
    expect(performance.now() - started).toBeLessThan(1000);
    // a simple pattern is still enforced
    expect(registry.validate('evil', { r: 'ABC' })).toMatchObject({ ok: false });
  });

  it('unregisters a tool: listings and validation drop it', () => {
    const registry = new ToolRegistry();
    registry.register(foreign('gone', {}));
    expect(registry.unregister('gone')).toBe(true);
    expect(registry.get('gone')).toBeUndefined();
    expect(registry.list().map((t) => t.name)).not.toContain('gone');
    expect(registry.unregister('gone')).toBe(false);
    registry.register(foreign('gone', {}));
    expect(registry.get('gone')).toBeDefined();
  });
});
