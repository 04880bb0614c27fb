import { describe, expect, it } from 'vitest';
import { AllowHosts, InvalidAllowHostError } from './allow-hosts.js';

describe('AllowHosts', () => {
  it('matches names, with and without a port, case- and trailing-dot-insensitively', () => {
    const a = new AllowHosts(['api.internal', 'db.internal:8443']);
    expect(a.matchName('api.internal', 80)).toBe('api.internal');
    expect(a.matchName('API.Internal.', 443)).toBe('api.internal');
    expect(a.matchName('db.internal', 8443)).toBe('db.internal:8443');
    expect(a.matchName('db.internal', 443)).toBeUndefined();
    expect(a.matchName('x.api.internal', 80)).toBeUndefined();
    expect(a.matchName('evilapi.internal', 80)).toBeUndefined();
  });

  it('matches every name below a *. entry, not the name itself', () => {
    const a = new AllowHosts(['*.corp.example']);
    expect(a.matchName('git.corp.example', 443)).toBe('*.corp.example');
    expect(a.matchName('a.b.corp.example', 443)).toBe('*.corp.example');
    expect(a.matchName('corp.example', 443)).toBeUndefined();
    expect(a.matchName('evilcorp.example', 443)).toBeUndefined();
  });

  it('matches addresses, CIDR blocks and ports; IPv4-mapped IPv6 matches IPv4 entries', () => {
    const a = new AllowHosts([
      '10.0.0.0/8',
      '127.0.0.1:8080',
      '[::1]:9090',
      'fd00::/8',
      '192.168.1.5',
    ]);
    expect(a.matchAddress('10.200.3.4', 80)).toBe('10.0.0.0/8');
    expect(a.matchAddress('127.0.0.1', 8080)).toBe('127.0.0.1:8080');
    expect(a.matchAddress('127.0.0.1', 8081)).toBeUndefined();
    expect(a.matchAddress('::ffff:127.0.0.1', 8080)).toBe('127.0.0.1:8080');
    expect(a.matchAddress('::1', 9090)).toBe('[::1]:9090');
    expect(a.matchAddress('::1', 80)).toBeUndefined();
    expect(a.matchAddress('fd12::1', 80)).toBe('fd00::/8');
    expect(a.matchAddress('192.168.1.5', 1234)).toBe('192.168.1.5');
    expect(a.matchAddress('192.168.1.6', 1234)).toBeUndefined();
    // Address entries are not names.
    expect(a.matchName('127.0.0.1', 8080)).toBeUndefined();
  });

  it('normalises legacy IPv4 spellings in entries', () => {
    expect(new AllowHosts(['127.1:8080']).matchAddress('127.0.0.1', 8080)).toBe('127.1:8080');
  });

  it.each([
    '',
    'a b',
    'host:99999',
    'host:x',
    '10.0.0.0/33',
    '[nope]:80',
    '*.10.0.0.1',
    'http://x/',
  ])('refuses %j, naming the entry', (entry) => {
    expect(() => new AllowHosts([entry])).toThrow(InvalidAllowHostError);
    expect(() => new AllowHosts([entry])).toThrow(/policy\.http\.allowHosts/);
  });
});
