import { describe, expect, it } from 'vitest';
import { compileLinear, translate, unenforceablePatterns } from './linear-regexp.js';

/** RE2's answer for `pattern` on `s` (the pattern must compile). */
function re2(pattern: string, s: string): boolean {
  const compiled = compileLinear(pattern);
  if (!compiled.ok) throw new Error(`${pattern}: ${compiled.reason}`);
  return compiled.rx.test(s);
}

const PATTERNS = [
  '^\\s+$',
  '^\\S+$',
  '^[\\s\\d]+$',
  '^[^\\s]+$',
  '^[\\Sx]$',
  '^.$',
  '^.+$',
  '^[^]$',
  '[]',
  '^\\u0041$',
  '^\\u{1F600}$',
  '^\\uD83D\\uDE00$',
  '^\\cJ$',
  '^\\0$',
  '^\\x41\\v$',
  '^[\\b]$',
  '\\bfoo\\b',
  '^\\p{L}+$',
  '^\\p{Letter}+$',
  '^\\P{Lu}+$',
  '^\\p{Script=Greek}+$',
  '^\\p{gc=Nd}+$',
  '^(?<year>\\d{4})-(?<month>\\d{2})$',
  '^[[]$',
  '^[a\\-z]+$',
  '^(?i:abc)$',
  '^[a-z0-9][a-z0-9_-]*$',
  "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$",
  '^\\/path\\.json$',
  '^a{2,3}?$',
  '^[😀-😂]$',
  '^[^a]$',
  'x$',
  '^$',
  '',
];
const SUBJECTS = [
  '',
  'a',
  'A',
  'abc',
  'ABC',
  'aBc',
  ' ',
  '\u00a0',
  '\t',
  '\n',
  '\r',
  '\v',
  '\u2028',
  '\ufeff',
  '\u200b',
  '\u3000',
  '😀',
  '😁',
  '😃',
  'é',
  'αβγ',
  'Ω',
  '٣',
  '\b',
  '\0',
  'foo bar',
  'foobar',
  '2024-05',
  '[',
  '-',
  'aa',
  'aaa',
  'aaaa',
  'Content-Type',
  '/path.json',
  'x\n',
  '\ud800',
];

describe('patterns on RE2 mean what they mean in ECMAScript (the u flag)', () => {
  it('answers as V8 does on every pattern and string of the table', () => {
    const differ: string[] = [];
    for (const p of PATTERNS) {
      const native = new RegExp(p, 'u');
      for (const s of SUBJECTS)
        if (native.test(s) !== re2(p, s))
          differ.push(`${p} on ${JSON.stringify(s)}: V8 ${native.test(s)}`);
    }
    expect(differ).toEqual([]);
  });

  it('reads `\\s`, `\\S` and `.` as V8 does on every code point of the BMP', () => {
    const differ: string[] = [];
    for (const p of ['^\\s$', '^\\S$', '^.$', '^[\\S]$', '^[^\\s]$']) {
      const native = new RegExp(p, 'u');
      for (let c = 0; c <= 0xffff; c++) {
        const s = String.fromCharCode(c);
        if (native.test(s) !== re2(p, s)) differ.push(`${p} U+${c.toString(16)}`);
      }
    }
    expect(differ).toEqual([]);
  });

  it('says which patterns RE2 cannot run, and why', () => {
    const reason = (p: string) => {
      const compiled = compileLinear(p);
      return compiled.ok ? 'ok' : compiled.reason;
    };
    expect(reason('^(?=.*\\d).+$')).toBe('lookahead');
    expect(reason('^(?!x)')).toBe('lookahead');
    expect(reason('(?<=a)b')).toBe('lookbehind');
    expect(reason('(?<!a)b')).toBe('lookbehind');
    expect(reason('(a)\\1')).toBe('backreference');
    expect(reason('(?<x>a)\\k<x>')).toBe('backreference');
    expect(reason('(?s:.)')).toBe('a modifier group other than i');
    expect(reason('^a{1001}$')).toMatch(/RE2 does not take it \(invalid repeat count/);
    // not ECMAScript at all: an invalid schema, as before
    expect(() => compileLinear('(?P<x>a)')).toThrow(SyntaxError);
    expect(translate('[^]|[]').text).toBe('[\\x{0}-\\x{10FFFF}]|[^\\x{0}-\\x{10FFFF}]');
  });

  it('runs patterns that backtrack for hours on V8 in linear time', () => {
    const long = 'a'.repeat(150_000);
    const started = performance.now();
    expect(re2('^(a+)+$', `${long}b`)).toBe(false);
    expect(re2('a*b', long)).toBe(false);
    expect(re2('^(a|aa)*c$', long)).toBe(false);
    expect(re2('^(\\w+\\s?)*$', `${'word '.repeat(30_000)}!`)).toBe(false);
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('finds the patterns and pattern keys of a schema, with their paths', () => {
    expect(
      unenforceablePatterns(
        {
          type: 'object',
          properties: {
            pattern: { type: 'string', pattern: '^(?!admin).*$' },
            ok: { type: 'string', pattern: '^[a-z]+$' },
            list: { type: 'array', items: { type: 'string', pattern: '(a)\\1' } },
            map: { type: 'object', patternProperties: { '^(?=x)': { type: 'string' } } },
          },
          $defs: { d: { anyOf: [{ pattern: '(?<=a)b' }] } },
          default: { pattern: '(?=not a schema)' },
        },
        '/inputSchema',
      ),
    ).toEqual([
      {
        path: '/inputSchema/properties/pattern/pattern',
        pattern: '^(?!admin).*$',
        reason: 'lookahead',
      },
      {
        path: '/inputSchema/properties/list/items/pattern',
        pattern: '(a)\\1',
        reason: 'backreference',
      },
      {
        path: '/inputSchema/properties/map/patternProperties/^(?=x)',
        pattern: '^(?=x)',
        reason: 'lookahead',
      },
      { path: '/inputSchema/$defs/d/anyOf/0/pattern', pattern: '(?<=a)b', reason: 'lookbehind' },
    ]);
  });
});
