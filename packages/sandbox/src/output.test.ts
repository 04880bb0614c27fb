import { describe, expect, it } from 'vitest';
import { encodeEnvelope } from './envelope.js';
import { CappedOutput } from './output.js';
import { parseSandboxConfig } from './config.js';

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
    expect(encodeEnvelope(['python3', '-'], 'print(1)').toString()).toBe('TOOLGATE1 2\npython3\0-\0print(1)');
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
