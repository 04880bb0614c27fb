import { describe, expect, it } from 'vitest';
import { definitionDiff, visibleJson, visibleText } from './format.js';

describe('the upstream definition diff', () => {
  it('spells out variation selectors, tag characters and other invisible text', () => {
    // "send" hidden as supplementary variation selectors, then as tags, then zero-width bits.
    const hidden =
      'Adds two numbers.\u{E0163}\u{E0155}\u{E0100}\uFE0F \u{E0073}\u200B\u202E\u00A0x';
    expect(visibleText(hidden)).toBe(
      'Adds two numbers.⟨U+E0163⟩⟨U+E0155⟩⟨U+E0100⟩⟨U+FE0F⟩ ⟨U+E0073⟩⟨U+200B⟩⟨U+202E⟩⟨U+00A0⟩x',
    );
    // ordinary text, accents and emoji stay as they are
    expect(visibleText('Crée un ticket ✅ — 日本語')).toBe('Crée un ticket ✅ — 日本語');
  });

  it('shows a change made only of invisible characters as a visible one', () => {
    const approved = { name: 'sum', description: 'Adds two numbers.' };
    const current = { name: 'sum', description: 'Adds two numbers.\uFE00\uFE01\u{E0100}' };
    const lines = definitionDiff(approved, current);
    expect(lines).toEqual([
      [' ', '{'],
      [' ', '  "name": "sum",'],
      ['-', '  "description": "Adds two numbers."'],
      ['+', '  "description": "Adds two numbers.⟨U+FE00⟩⟨U+FE01⟩⟨U+E0100⟩"'],
      [' ', '}'],
    ]);
    // and the single definition view, for a tool never approved
    expect(visibleJson({ d: 'a\u2028b\u{E0001}' })).toBe('{\n  "d": "a⟨U+2028⟩b⟨U+E0001⟩"\n}');
  });
});
