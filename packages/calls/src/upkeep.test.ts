import { describe, expect, it } from 'vitest';
import { Upkeep } from './upkeep.js';

describe('Upkeep', () => {
  it('is due at a key’s first write, then once per interval', () => {
    const upkeep = new Upkeep(1000);
    expect(upkeep.due('a', 1, Infinity, 0)).toBe(true);
    expect(upkeep.due('a', 1, Infinity, 999)).toBe(false);
    expect(upkeep.due('b', 1, Infinity, 999)).toBe(true);
    expect(upkeep.due('a', 1, Infinity, 1000)).toBe(true);
    expect(upkeep.due('a', 1, Infinity, 1500)).toBe(false);
  });

  it('is due sooner once a cap’s worth was added since, so a trimmed key stays within 2× its cap', () => {
    const upkeep = new Upkeep(60_000);
    const cap = 100;
    let length = 0;
    let longest = 0;
    for (let i = 0; i < 1000; i++) {
      length += 7;
      if (upkeep.due('list', 7, cap, i)) length = Math.min(length, cap);
      longest = Math.max(longest, length);
    }
    expect(longest).toBeLessThan(2 * cap);
  });

  it('forgets everything past its key budget instead of growing', () => {
    const upkeep = new Upkeep(60_000, 3);
    for (const k of ['a', 'b', 'c']) expect(upkeep.due(k, 1, Infinity, 0)).toBe(true);
    expect(upkeep.due('a', 1, Infinity, 1)).toBe(false);
    expect(upkeep.due('d', 1, Infinity, 1)).toBe(true);
    // The memory started over: a is due again.
    expect(upkeep.due('a', 1, Infinity, 2)).toBe(true);
  });
});
