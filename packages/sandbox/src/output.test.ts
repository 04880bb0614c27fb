import { describe, expect, it } from 'vitest';
import { ExitMarkerScanner, encodeEnvelope } from './envelope.js';
import { CappedOutput } from './output.js';
import { parseSandboxConfig } from './config.js';
import type { PreparedRun } from './run-request.js';
import { RunWatchdog } from './watchdog.js';

describe('CappedOutput', () => {
  it('keeps the first bytes up to the cap and says it truncated', () => {
    const out = new CappedOutput(10, 2);
    out.push(Buffer.from('hello '));
    out.push(Buffer.from('world!'));
    expect(out.text()).toBe('hello worl');
    expect(out.truncated).toBe(true);
    expect(out.flooding).toBe(false);
    out.push(Buffer.alloc(20));
    expect(out.flooding).toBe(true);
  });
});

describe('encodeEnvelope', () => {
  it('frames argv NUL-terminated after a header, then stdin', () => {
    expect(encodeEnvelope(['python3', '-'], 'print(1)').toString()).toBe(
      'TOOLGATE1 2\npython3\0-\0print(1)',
    );
    expect(() => encodeEnvelope([])).toThrow(/argv/);
    expect(() => encodeEnvelope(['a\0b'])).toThrow(/NUL/);
  });
});

describe('parseSandboxConfig', () => {
  it('fills every default', () => {
    const c = parseSandboxConfig({});
    expect(c.driver).toBe('auto');
    expect(c.images.python?.docker).toBe('toolgate/sandbox-python:local');
    expect(c.limits).toMatchObject({ memoryMb: 512, pids: 128, timeoutMs: 30_000 });
    expect(c.pool.size).toBe(2);
  });

  it('names the field that is wrong', () => {
    expect(() => parseSandboxConfig({ driver: 'lxc' as 'docker' })).toThrow(/driver/);
    expect(() => parseSandboxConfig({ limits: { memoryMb: 1 } })).toThrow(/memoryMb/);
  });
});

describe('ExitMarkerScanner', () => {
  const line = '\x1eTGEXIT abc123 3 0\n';

  it('forwards output before the exit line and parses it, even split byte by byte', () => {
    const seen: Buffer[] = [];
    const scanner = new ExitMarkerScanner('abc123', (b) => seen.push(b));
    const all = Buffer.from(`out \x1e not a marker\n${line}late output`);
    for (const byte of all) scanner.push(Buffer.from([byte]));
    expect(Buffer.concat(seen).toString()).toBe('out \x1e not a marker\n');
    expect(scanner.report).toEqual({ exitCode: 3, oomKills: 0 });
  });

  it('ignores a line with another nonce, and flushes held bytes at the end', () => {
    const seen: Buffer[] = [];
    const scanner = new ExitMarkerScanner('abc123', (b) => seen.push(b));
    scanner.push(Buffer.from('x\x1eTGEXIT forged 0 0\n\x1eTG'));
    scanner.flush();
    expect(Buffer.concat(seen).toString()).toBe('x\x1eTGEXIT forged 0 0\n\x1eTG');
    expect(scanner.done).toBe(false);
  });
});

describe('RunWatchdog live output', () => {
  const prepared = (outputBytes: number, onOutput: (s: string, t: string) => void) =>
    ({ key: 'shell', timeoutMs: 60_000, outputBytes, onOutput }) as unknown as PreparedRun;

  it('adds up to the result, whole characters only, even when the cap cuts one', () => {
    const seen: string[] = [];
    const watch = new RunWatchdog(
      prepared(5, (_s, t) => seen.push(t)),
      () => undefined,
    );
    // "a€€": 61 e2 82 ac e2 82 ac, written a byte at a time; the cap keeps 5 bytes.
    for (const byte of Buffer.from('a€€')) watch.onStdout(Buffer.from([byte]));
    const result = watch.result('bwrap', { exitCode: 0, oomKilled: false, warm: false }, undefined);
    watch.dispose();
    expect(seen).toEqual(['a', '€', '\ufffd']);
    expect(seen.join('')).toBe(result.stdout);
    watch.onStdout(Buffer.from('late'));
    expect(seen).toHaveLength(3);
  });
});
