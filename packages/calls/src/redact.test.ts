import { describe, expect, it } from 'vitest';
import { redact } from './redact.js';

describe('redact', () => {
  it('masks secret-looking fields at any depth and bearer tokens in text', () => {
    expect(
      redact({
        url: 'https://api.example.com',
        headers: { Authorization: 'Bearer abc', 'X-Api-Key': 'k', accept: 'json' },
        nested: [{ password: 'p', note: 'use Bearer sk-live-1234567890abcdef please' }],
        apiKey: 'x',
        key: 'y',
      }),
    ).toEqual({
      url: 'https://api.example.com',
      headers: { Authorization: '[redacted]', 'X-Api-Key': '[redacted]', accept: 'json' },
      nested: [{ password: '[redacted]', note: 'use Bearer [redacted] please' }],
      apiKey: '[redacted]',
      key: '[redacted]',
    });
  });

  it('cuts long strings, long arrays and deep nesting', () => {
    expect(redact('x'.repeat(600))).toBe(`${'x'.repeat(500)}…(600 chars)`);
    expect((redact(Array.from({ length: 60 }, (_, i) => i)) as unknown[]).at(-1)).toBe(
      '…(10 more)',
    );
    let deep: unknown = 1;
    for (let i = 0; i < 20; i++) deep = { d: deep };
    expect(JSON.stringify(redact(deep))).toContain('"[…]"');
  });

  it('keeps a __proto__ key as plain data', () => {
    const out = redact(JSON.parse('{"__proto__": {"polluted": true}}')) as Record<string, unknown>;
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(Object.keys(out)).toEqual(['__proto__']);
  });
});
