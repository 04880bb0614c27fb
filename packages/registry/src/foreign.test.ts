import { describe, expect, it } from 'vitest';
import { FOREIGN_PATTERN_LIMITS, unenforceablePatterns } from './linear-regexp.js';
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

  it('checks every pattern in linear time: an adversarial argument is answered at once', () => {
    const registry = new ToolRegistry();
    registry.register(
      foreign('evil', {
        q: { type: 'string', pattern: '^(a+)+$' },
        r: { type: 'string', pattern: '^[a-z]+$' },
        s: { type: 'string', pattern: 'a*b' },
        items: { type: 'array', items: { type: 'string', pattern: 'a*a*a*b' } },
      }),
    );
    const long = 'a'.repeat(150_000);
    const started = performance.now();
    // enforced now (the upstream would refuse it too), where V8 would backtrack for hours
    expect(registry.validate('evil', { q: `${'a'.repeat(40)}b` })).toMatchObject({ ok: false });
    expect(registry.validate('evil', { q: `${long}b` })).toMatchObject({ ok: false });
    expect(registry.validate('evil', { q: long })).toMatchObject({ ok: true });
    // `a*b` on 150,000 characters kept the gateway busy 18 s
    expect(registry.validate('evil', { s: long })).toMatchObject({
      ok: false,
      issues: [{ path: '/s', keyword: 'pattern' }],
    });
    // 2.8 s per 256-character item before
    const items = Array.from({ length: 200 }, () => 'a'.repeat(256));
    const result = registry.validate('evil', { items });
    expect(result).toMatchObject({ ok: false });
    expect(performance.now() - started).toBeLessThan(1000);
    expect(registry.validate('evil', { r: 'ABC' })).toMatchObject({ ok: false });
  });

  it("checks an upstream's result against its patterns in linear time", () => {
    const registry = new ToolRegistry();
    registry.register({
      ...foreign('structured', {}),
      result: {
        type: 'object',
        properties: { text: { type: 'string', pattern: '^(\\w+\\s?)*$' } },
      } as unknown as AnyToolSpec['result'],
    });
    const started = performance.now();
    const check = registry.checkResult('structured', { text: `${'word '.repeat(12_000)}!` });
    expect(check).toMatchObject({ ok: false, issues: [{ path: '/text', keyword: 'pattern' }] });
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('leaves a pattern RE2 cannot run to the upstream, and says which', () => {
    const registry = new ToolRegistry();
    const properties = {
      pw: { type: 'string', pattern: '^(?=.*\\d).{8,}$' },
      twice: { type: 'string', pattern: '^(a)\\1$' },
      name: { type: 'string', pattern: '^[a-z]+$' },
    };
    registry.register(foreign('looks', properties));
    // not enforced here: the upstream checks its own schema
    expect(registry.validate('looks', { pw: 'short', twice: 'ab' })).toMatchObject({ ok: true });
    // the others still are
    expect(registry.validate('looks', { name: 'A' })).toMatchObject({ ok: false });
    expect(unenforceablePatterns({ type: 'object', properties }, '/inputSchema')).toEqual([
      {
        path: '/inputSchema/properties/pw/pattern',
        pattern: '^(?=.*\\d).{8,}$',
        reason: 'lookahead',
      },
      {
        path: '/inputSchema/properties/twice/pattern',
        pattern: '^(a)\\1$',
        reason: 'backreference',
      },
    ]);
  });

  it('refuses our own tool whose pattern RE2 cannot run, naming the tool and the path', () => {
    const registry = new ToolRegistry();
    const own = (properties: Record<string, unknown>, result?: unknown): AnyToolSpec => ({
      ...foreign('mine', properties),
      foreignSchemas: false,
      ...(result ? { result: result as AnyToolSpec['result'] } : {}),
    });
    expect(() =>
      registry.register(own({ q: { type: 'string', pattern: '^(?!admin)[a-z]+$' } })),
    ).toThrow(
      'tool "mine": the pattern "^(?!admin)[a-z]+$" at /parameters/properties/q/pattern cannot run in linear time: lookahead',
    );
    expect(() =>
      registry.register(
        own({}, { type: 'object', patternProperties: { '(x)\\1': { type: 'string' } } }),
      ),
    ).toThrow('at /result/patternProperties/(x)\\1 cannot run in linear time: backreference');
    // Unicode patterns of our own keep working
    registry.register(own({ q: { type: 'string', pattern: '^\\p{L}[\\p{L}\\s]*$' } }));
    expect(registry.validate('mine', { q: 'Ünïcödé wörds' })).toMatchObject({ ok: true });
    expect(registry.validate('mine', { q: '1x' })).toMatchObject({ ok: false });
  });

  it('stops checking foreign patterns after the work budget of one validation', () => {
    const registry = new ToolRegistry();
    // ~2000 RE2 instructions: 3000 characters are 6M units, over the budget
    registry.register(foreign('big', { q: { type: 'string', pattern: '^[a-z]{0,999}$' } }));
    expect(registry.validate('big', { q: '!'.repeat(100) })).toMatchObject({ ok: false });
    expect(registry.validate('big', { q: '!'.repeat(3000) })).toMatchObject({ ok: true });
    // each validation has its own budget
    expect(registry.validate('big', { q: '!' })).toMatchObject({ ok: false });
    expect(FOREIGN_PATTERN_LIMITS.work).toBe(5_000_000);
  });

  it("compiles at most the tool's budget of RE2 instructions; the rest is left to the upstream", () => {
    const registry = new ToolRegistry();
    // ~4,000 instructions each in 27 characters (re2js compiles ~5 µs per instruction): a
    // definition's 64 KiB of them would take seconds to compile on every gateway and worker
    const properties = Object.fromEntries(
      Array.from({ length: 100 }, (_, i) => [
        `p${i}`,
        { type: 'string', pattern: `^(?:a${i}){999}$|^(?:b${i}){999}$` },
      ]),
    );
    const tool = registry.register(foreign('costly', properties));
    // two patterns (8,000 instructions) enforced, the others not, each reported
    expect(tool.unenforcedPatterns).toHaveLength(98);
    expect(tool.unenforcedPatterns![0]).toEqual({
      path: '/inputSchema/properties/p2/pattern',
      pattern: '^(?:a2){999}$|^(?:b2){999}$',
      reason: "the tool's patterns pass 10000 RE2 instructions",
    });
    expect(registry.validate('costly', { p0: 'x' })).toMatchObject({ ok: false });
    expect(registry.validate('costly', { p2: 'x' })).toMatchObject({ ok: true });
    // one pattern alone past PATTERN_SIZE_MAX: not compiled, anywhere
    expect(
      registry.register(
        foreign('huge', { q: { type: 'string', pattern: '(?:ab){999}'.repeat(6) } }),
      ).unenforcedPatterns,
    ).toMatchObject([{ reason: 'too large: about 11988 RE2 instructions (at most 10000)' }]);
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
