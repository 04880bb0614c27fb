import { describe, expect, it } from 'vitest';
import { ToolError } from '@toolgate/registry';
import { evaluate } from './calculator.js';

describe('calculator', () => {
  it.each([
    ['2*(3+4)', 14],
    ['1 + 2 * 3', 7],
    ['(1 + 2) * 3', 9],
    ['10 / 4', 2.5],
    ['10 % 4', 2],
    ['2 ** 3 ** 2', 512],
    ['2 ^ 10', 1024],
    ['-2 ** 2', -4],
    ['--3', 3],
    ['-(4 - 6)', 2],
    ['sqrt(16) + abs(-2)', 6],
    ['max(1, 7, 3)', 7],
    ['round(pi * 100) / 100', 3.14],
    ['1.5e3 + .5', 1500.5],
    ['  7  ', 7],
  ])('%s = %s', (expression, expected) => {
    expect(evaluate(expression)).toBe(expected);
  });

  it.each([
    ['', 'empty'],
    ['2 +', 'ends too early'],
    ['(1 + 2', 'expected ")"'],
    ['1 + 2)', 'unexpected ")"'],
    ['foo(1)', 'unknown function "foo"'],
    ['constructor', 'unknown name "constructor"'],
    ['toString(1)', 'unknown function "tostring"'],
    ['__proto__', 'unknown name "__proto__"'],
    ['process.exit(1)', 'unexpected character'],
    ['require("fs")', 'unexpected character'],
    ['x = 1', 'unexpected character'],
  ])('rejects %j with a clear message', (expression, message) => {
    expect(() => evaluate(expression)).toThrow(ToolError);
    expect(() => evaluate(expression)).toThrow(message);
  });

  it('reports division by zero and non-finite results with their own codes', () => {
    expect(() => evaluate('1/0')).toThrow(expect.objectContaining({ code: 'division_by_zero' }));
    expect(() => evaluate('10 ** 400')).toThrow(expect.objectContaining({ code: 'not_finite' }));
  });

  it('refuses absurd nesting instead of overflowing the stack', () => {
    expect(() => evaluate('('.repeat(200) + '1' + ')'.repeat(200))).toThrow(/nested too deeply/);
  });
});
