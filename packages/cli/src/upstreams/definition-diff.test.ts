import { describe, expect, it } from 'vitest';
// The console's spelling (a browser bundle, so a copy rather than a shared module): the two must
// not drift apart, or the terminal and the console would show one definition differently.
import { visibleText as consoleVisibleText } from '../../../../console/src/format.js';
import { definitionDiff, visibleText } from './definition-diff.js';

describe('the upstream definition diff of `toolgate upstreams`', () => {
  it('spells out variation selectors, tags, zero-width and bidi characters', () => {
    expect(visibleText('Adds.\u{E0163}\uFE0F \u200B\u202E\u00A0x')).toBe(
      'Adds.⟨U+E0163⟩⟨U+FE0F⟩ ⟨U+200B⟩⟨U+202E⟩⟨U+00A0⟩x',
    );
    expect(visibleText('Crée un ticket ✅ — 日本語')).toBe('Crée un ticket ✅ — 日本語');
  });

  it('spells every code point as the console does', () => {
    const points = Array.from({ length: 0x3000 }, (_, i) => i).concat([
      0xe0001, 0xe0100, 0xe01ef, 0xf0000, 0x10ffff, 0x1f600,
    ]);
    const differ = points.filter((p) => {
      const c = String.fromCodePoint(p);
      return visibleText(c) !== consoleVisibleText(c);
    });
    expect(differ.map((p) => `U+${p.toString(16).toUpperCase()}`)).toEqual([]);
  });

  it('shows a change made only of invisible characters as a visible unified diff', () => {
    const approved = { name: 'sum', description: 'Adds two numbers.', a: 1, b: 2, c: 3, d: 4 };
    const current = { ...approved, description: 'Adds two numbers.\uFE00\u{E0100}' };
    expect(definitionDiff(approved, current)).toEqual([
      '--- approved',
      '+++ current',
      '@@ -1,6 +1,6 @@',
      ' {',
      '   "name": "sum",',
      '-  "description": "Adds two numbers.",',
      '+  "description": "Adds two numbers.⟨U+FE00⟩⟨U+E0100⟩",',
      '   "a": 1,',
      '   "b": 2,',
      '   "c": 3,',
    ]);
    expect(definitionDiff(approved, { ...approved })).toEqual([]);
  });

  it('a tool never approved: its whole definition as added lines', () => {
    expect(definitionDiff(undefined, { name: 'echo' })).toEqual([
      '--- approved',
      '+++ current',
      '@@ -0,0 +1,3 @@',
      '+{',
      '+  "name": "echo"',
      '+}',
    ]);
  });
});
