import { describe, expect, it } from 'vitest';
import { JsonScanner, MAX_ARRAY, MAX_BODY_KEYS, MAX_DEPTH, MAX_NODES } from './json-scanner.js';

/** The scanner's verdict on `text`, fed in pieces of `step` bytes. */
function scan(text: string | Buffer, step = Infinity) {
  const bytes = typeof text === 'string' ? Buffer.from(text) : text;
  const scanner = new JsonScanner();
  for (let i = 0; i < bytes.length; i += step) {
    const problem = scanner.write(bytes.subarray(i, Math.min(bytes.length, i + step)));
    if (problem) return problem;
  }
  return scanner.end();
}

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

// Hand-picked texts around every state of the scanner; JSON.parse is the reference.
const CASES = [
  '{}',
  '[]',
  ' { } ',
  '{"a":1}',
  '{"a":1,}',
  '{,"a":1}',
  '{"a" 1}',
  '{"a":}',
  '{a:1}',
  "{'a':1}",
  '[1,2,3]',
  '[1,,2]',
  '[1 2]',
  '[,]',
  '[1,]',
  '[',
  ']',
  '{"a":[1,{"b":null}]}',
  '{"a":[1,{"b":null]}}',
  '"text"',
  '"unterminated',
  '"tab\there"',
  '"nl\nhere"',
  '"esc \\" \\\\ \\/ \\b \\f \\n \\r \\t"',
  '"bad \\x escape"',
  '"\\u00e9\\uD800"',
  '"\\u00g0"',
  '"\\u12"',
  '"ünïcødé ✓"',
  '0',
  '-0',
  '01',
  '-',
  '-a',
  '1.',
  '1.5',
  '.5',
  '1e5',
  '1E+5',
  '1e-5',
  '1e',
  '1e+',
  '1.5e3',
  '1.e3',
  '0.0e0',
  '00',
  '-01',
  '1 2',
  'true',
  'false',
  'null',
  'tru',
  'truex',
  'nul',
  'True',
  'NaN',
  'Infinity',
  '[true,false,null]',
  '[truefalse]',
  '{"a":1}x',
  '{"a":1}  ',
  '{"a":1} {}',
  ' ',
  '\t\n\r{}\n',
  '\f{}',
  '{"a":1e5,"b":-0.5E-3,"c":[0,-1,2.25]}',
  '[1]]',
  '[[1]',
  '{"a":{"b":{}}}}',
  '{"a\\u0000b":1}',
];

describe('JsonScanner', () => {
  it('accepts exactly what JSON.parse accepts, whatever the chunk boundaries', () => {
    for (const text of CASES) {
      const expected = parses(text);
      for (const step of [Infinity, 1, 2, 3]) {
        expect(
          scan(text, step) === undefined,
          `${JSON.stringify(text)} in ${step}-byte chunks`,
        ).toBe(expected);
      }
    }
  });

  it('agrees with JSON.parse on random mutations of JSON texts', () => {
    let seed = 20261201;
    const rand = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    const alphabet = '{}[]:,"\\ -+.0123456789eEtrufalsn\tx\u00e9';
    const base = JSON.stringify({
      a: [1, -2.5e3, true, false, null, 'x\n"y'],
      b: { c: {}, d: [] },
      e: '\u00e9\u2713',
    });
    let disagreements = 0;
    const examples: string[] = [];
    for (let n = 0; n < 20_000; n++) {
      const chars = [...base];
      for (let k = 1 + Math.floor(rand() * 3); k > 0; k--) {
        const at = Math.floor(rand() * (chars.length + 1));
        const c = alphabet[Math.floor(rand() * alphabet.length)]!;
        const op = rand();
        if (op < 0.4) chars.splice(at, 1);
        else if (op < 0.8) chars.splice(at, 0, c);
        else chars[Math.min(at, chars.length - 1)] = c;
      }
      const text = chars.join('');
      const step = 1 + Math.floor(rand() * 16);
      if ((scan(text, step) === undefined) !== parses(text)) {
        disagreements++;
        if (examples.length < 5) examples.push(text);
      }
    }
    expect(examples).toEqual([]);
    expect(disagreements).toBe(0);
  });

  it('an empty body is accepted (it stands for {}); a byte order mark may open the body', () => {
    expect(scan('')).toBeUndefined();
    expect(scan(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"a":1}')]))).toBe(
      undefined,
    );
  });

  it('refuses each limit at the first value past it, while the rest has not arrived', () => {
    const keys = (n: number) =>
      '{' + Array.from({ length: n }, (_, i) => `"k${i}":0`).join(',') + '}';
    expect(scan(keys(MAX_BODY_KEYS))).toBeUndefined();
    expect(scan(keys(MAX_BODY_KEYS + 1))).toMatchObject({
      kind: 'limit',
      message: `the request body has more than ${MAX_BODY_KEYS} object keys`,
    });

    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    expect(scan(deep(MAX_DEPTH))).toBeUndefined();
    expect(scan(deep(MAX_DEPTH + 1))).toMatchObject({
      kind: 'limit',
      message: `the request body is nested deeper than ${MAX_DEPTH} levels`,
    });

    const array = (n: number) => JSON.stringify(Array.from({ length: n }, () => 0));
    expect(scan(array(MAX_ARRAY))).toBeUndefined();
    expect(scan(array(MAX_ARRAY + 1))).toMatchObject({
      kind: 'limit',
      message: `the request body has an array longer than ${MAX_ARRAY} items`,
    });

    // Many arrays under the item cap, more values in all than MAX_NODES.
    const rows = Math.ceil(MAX_NODES / MAX_ARRAY) + 1;
    expect(
      scan(`[${Array.from({ length: rows }, () => array(MAX_ARRAY)).join(',')}]`),
    ).toMatchObject({
      kind: 'limit',
      message: `the request body has more than ${MAX_NODES} values`,
    });

    // Found in the first chunk: the scanner says so before the rest is written.
    const scanner = new JsonScanner();
    expect(scanner.write(Buffer.from(keys(MAX_BODY_KEYS + 1).slice(0, -1)))).toMatchObject({
      kind: 'limit',
    });
  });

  it('names the offending byte and where it is', () => {
    expect(scan('{"a":1,}', 3)).toEqual({
      kind: 'syntax',
      message:
        'the request body is not valid JSON: unexpected "}" at byte 7 (a key must be a string)',
    });
    expect(scan('{"a":1')).toEqual({
      kind: 'syntax',
      message: 'the request body is not valid JSON: it ends too early',
    });
  });
});
