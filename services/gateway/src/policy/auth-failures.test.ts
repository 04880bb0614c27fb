import { describe, expect, it } from 'vitest';
import { bucket } from './auth-failures.js';

describe('the counted source address', () => {
  it('is the IPv4 address, also when the socket reports it IPv4-mapped', () => {
    expect(bucket('203.0.113.7')).toBe('203.0.113.7');
    expect(bucket('::ffff:203.0.113.7')).toBe('203.0.113.7');
  });

  it('is the /64 for IPv6, however the address is written', () => {
    const net = '2001:db8:a:b::/64';
    expect(bucket('2001:db8:a:b::1')).toBe(net);
    expect(bucket('2001:0DB8:000a:000b:ffff:1:2:3')).toBe(net);
    expect(bucket('2001:db8:a:b:1::')).toBe(net);
    expect(bucket('2001:db8:a:c::1')).not.toBe(net);
    expect(bucket('::1')).toBe('0:0:0:0::/64');
  });
});
