import { parseConfig } from '@toolgate/config';
import { describe, expect, it } from 'vitest';
import { OriginPolicy } from './origin.js';

describe('OriginPolicy', () => {
  it('production: only the listed origins, exact port unless :*; no Origin passes', () => {
    const policy = new OriginPolicy(['https://app.example.com', 'http://localhost:*'], false);
    expect(policy.check('https://app.example.com', 'gw.internal').ok).toBe(true);
    expect(policy.check('https://app.example.com:443', 'gw.internal').ok).toBe(true);
    expect(policy.check('https://app.example.com:8443', 'gw.internal').ok).toBe(false);
    expect(policy.check('http://app.example.com', 'gw.internal').ok).toBe(false);
    expect(policy.check('http://localhost:5173', 'gw.internal').ok).toBe(true);
    expect(policy.check('https://evil.example', 'gw.internal')).toEqual({
      ok: false,
      reason: 'Origin https://evil.example is not in server.allowedOrigins',
    });
    expect(policy.check('null', 'gw.internal').ok).toBe(false);
    expect(policy.check(undefined, 'anything').ok).toBe(true);
    expect(new OriginPolicy([], false).check('http://localhost:3000', 'x').ok).toBe(false);
  });

  it('development: localhost pages on any port, loopback Host names only', () => {
    const dev = new OriginPolicy([], true);
    expect(dev.check('http://localhost:3000', 'localhost:8080').ok).toBe(true);
    expect(dev.check('http://[::1]:3000', '127.0.0.1:8080').ok).toBe(true);
    expect(dev.check(undefined, '[::1]:8080').ok).toBe(true);
    expect(dev.check('http://evil.example', 'localhost:8080').ok).toBe(false);
    expect(dev.check(undefined, 'evil.example:8080').ok).toBe(false);
    expect(dev.check(undefined, undefined).ok).toBe(false);
  });

  it('server.allowedOrigins entries must be scheme://host[:port]', () => {
    const parse = (allowedOrigins: unknown) =>
      parseConfig({ server: { allowedOrigins } }, {}).server.allowedOrigins;
    expect(parse(['https://a.example', 'http://localhost:*'])).toEqual([
      'https://a.example',
      'http://localhost:*',
    ]);
    expect(() => parse(['a.example'])).toThrow(/allowedOrigins/);
    expect(() => parse(['https://a.example/path'])).toThrow(/allowedOrigins/);
    expect(() => new OriginPolicy(['http://a b'], false)).toThrow(/allowedOrigins/);
  });
});
