import { describe, expect, it } from 'vitest';
import { capOutcome } from './result-cap.js';
import type { CallOutcome } from './types.js';

const outcome = (fields: Partial<CallOutcome>): CallOutcome => ({
  id: 'c1',
  tool: 't',
  status: 'ok',
  durationMs: 1,
  cached: false,
  ...fields,
});
const storedBytes = (o: CallOutcome) =>
  Buffer.byteLength(JSON.stringify({ result: o.result, error: o.error }));

describe('capOutcome', () => {
  it('leaves an outcome within the cap as it is', () => {
    const small = outcome({ result: { stdout: 'hi' } });
    expect(capOutcome(small, 1024)).toBe(small);
  });

  it('cuts the longest strings first, keeps the shape and says what it cut', () => {
    const stdout = 'o'.repeat(300_000);
    const big = outcome({ result: { exitCode: 0, stdout, stderr: 'e'.repeat(100_000) } });
    const capped = capOutcome(big, 10_000);
    const result = capped.result as { exitCode: number; stdout: string; stderr: string };
    expect(storedBytes(capped)).toBeLessThanOrEqual(10_000);
    expect(result.exitCode).toBe(0);
    expect(result.stdout.startsWith('oooo')).toBe(true);
    expect(result.stdout.endsWith('…[truncated]')).toBe(true);
    // Cut to a common length: stderr keeps its beginning too.
    expect(result.stderr.startsWith('eeee')).toBe(true);
    expect(capped.resultTruncated).toEqual({ originalBytes: storedBytes(big), maxBytes: 10_000 });
    // The original is untouched: the synchronous answer still carries it whole.
    expect((big.result as { stdout: string }).stdout).toBe(stdout);
  });

  it('counts JSON escapes and never splits a character', () => {
    const big = outcome({ result: { body: '\u0001"\n😀'.repeat(50_000) } });
    const capped = capOutcome(big, 4096);
    expect(storedBytes(capped)).toBeLessThanOrEqual(4096);
    expect((capped.result as { body: string }).body.isWellFormed()).toBe(true);
  });

  it('falls back to a text preview when no string is long enough to cut', () => {
    const big = outcome({ result: Array.from({ length: 50_000 }, (_, i) => i) });
    const capped = capOutcome(big, 2048);
    expect(storedBytes(capped)).toBeLessThanOrEqual(2048);
    expect(typeof capped.result).toBe('string');
    expect((capped.result as string).startsWith('[0,1,2,3')).toBe(true);
    expect(capped.resultTruncated?.maxBytes).toBe(2048);
  });

  it('caps error details too', () => {
    const big = outcome({
      status: 'error',
      error: { code: 'exit_code', message: 'failed', details: { stderr: 'x'.repeat(100_000) } },
    });
    const capped = capOutcome(big, 2048);
    expect(storedBytes(capped)).toBeLessThanOrEqual(2048);
    expect(capped.error?.code).toBe('exit_code');
    expect(capped.resultTruncated).toBeDefined();
  });
});
