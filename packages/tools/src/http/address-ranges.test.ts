import { describe, expect, it } from 'vitest';
import { classifyAddress, parseIp } from './address-ranges.js';

describe('classifyAddress', () => {
  it.each([
    ['8.8.8.8', 'public'],
    ['93.184.216.34', 'public'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.1.1', 'linkLocal'],
    ['100.64.0.1', 'carrierGradeNat'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.1', 'reserved'],
    ['198.18.0.1', 'reserved'],
    ['169.254.169.254', 'cloudMetadata'],
    ['169.254.170.2', 'cloudMetadata'],
    ['100.100.100.200', 'cloudMetadata'],
  ])('IPv4 %s is %s', (address, range) => {
    expect(classifyAddress(address)).toMatchObject({ address, family: 4, range });
  });

  it.each([
    ['2606:4700:4700::1111', 'public'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'linkLocal'],
    ['fc00::1', 'uniqueLocal'],
    ['fd12:3456::1', 'uniqueLocal'],
    ['ff02::1', 'multicast'],
    ['fec0::1', 'deprecatedSiteLocal'],
    ['2001:db8::1', 'reserved'],
    ['100::1', 'discard'],
    ['fd00:ec2::254', 'cloudMetadata'],
    // IPv4-compatible and other space outside 2000::/3 is not routable.
    ['::7f00:1', 'reserved'],
    ['::8.8.8.8', 'reserved'],
    ['4000::1', 'reserved'],
  ])('IPv6 %s is %s', (address, range) => {
    expect(classifyAddress(address)).toMatchObject({ family: 6, range });
  });

  it('judges IPv6 addresses that embed IPv4 by the IPv4 address', () => {
    expect(classifyAddress('::ffff:127.0.0.1')).toEqual({
      address: '::ffff:7f00:1',
      family: 6,
      range: 'loopback',
      embeddedIPv4: '127.0.0.1',
      via: 'ipv4Mapped',
    });
    expect(classifyAddress('::ffff:7f00:1')).toMatchObject({
      range: 'loopback',
      via: 'ipv4Mapped',
    });
    expect(classifyAddress('::ffff:a9fe:a9fe')).toMatchObject({
      range: 'cloudMetadata',
      embeddedIPv4: '169.254.169.254',
    });
    expect(classifyAddress('::ffff:8.8.8.8')).toMatchObject({
      range: 'public',
      embeddedIPv4: '8.8.8.8',
    });
    expect(classifyAddress('::ffff:0:10.0.0.1')).toMatchObject({
      range: 'private',
      via: 'rfc6145',
    });
    // NAT64 well-known prefix
    expect(classifyAddress('64:ff9b::7f00:1')).toMatchObject({ range: 'loopback', via: 'rfc6052' });
    expect(classifyAddress('64:ff9b::8.8.8.8')).toMatchObject({ range: 'public' });
    // local-use NAT64 prefix: blocked as a whole
    expect(classifyAddress('64:ff9b:1::1')).toMatchObject({ range: 'rfc6052' });
    // 6to4
    expect(classifyAddress('2002:7f00:1::1')).toMatchObject({ range: 'loopback', via: '6to4' });
    expect(classifyAddress('2002:c0a8:101::1')).toMatchObject({
      range: 'private',
      embeddedIPv4: '192.168.1.1',
    });
    expect(classifyAddress('2002:808:808::1')).toMatchObject({ range: 'public' });
    // Teredo: server 65.54.227.120, client ~(0x3f57:0xfefe) = 192.168.1.1 → private
    expect(classifyAddress('2001:0:4136:e378:8000:63bf:3f57:fefe')).toMatchObject({
      range: 'private',
      embeddedIPv4: '192.168.1.1',
      via: 'teredo',
    });
  });

  it('calls anything that is not a literal address invalid', () => {
    expect(classifyAddress('example.com').range).toBe('invalid');
    expect(classifyAddress('fe80::1%eth0').range).toBe('invalid');
    expect(classifyAddress('').range).toBe('invalid');
    // Legacy IPv4 spellings are not literals here: the URL parser normalises them first.
    expect(classifyAddress('2130706433').range).toBe('invalid');
    expect(classifyAddress('0x7f.1').range).toBe('invalid');
  });
});

describe('parseIp', () => {
  it('accepts bracketed IPv6 and strict dotted IPv4 only', () => {
    expect(parseIp('[::1]')?.toString()).toBe('::1');
    expect(parseIp('1.2.3.4')?.toString()).toBe('1.2.3.4');
    expect(parseIp('1.2.3')).toBeUndefined();
    expect(parseIp('localhost')).toBeUndefined();
  });
});

describe('the URL parser normalises numeric host forms before the guard sees them', () => {
  it.each([
    'http://2130706433/',
    'http://0x7f000001/',
    'http://0177.0.0.1/',
    'http://127.1/',
    'http://0x7f.0.0.1/',
    'http://127.0.0.1./',
    'http://%31%32%37.0.0.1/',
  ])('%s', (input) => {
    const host = new URL(input).hostname;
    expect(host).toBe('127.0.0.1');
    expect(classifyAddress(host).range).toBe('loopback');
  });
});
