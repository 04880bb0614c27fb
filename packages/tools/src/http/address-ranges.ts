/**
 * Address classification for the SSRF guard (docs/spec.md §6): which special-purpose range an IP address
 * falls in. Only globally routable unicast is `public`; everything else is refused unless the
 * policy opens it. Ranges come from ipaddr.js; addresses that carry an IPv4 address inside an
 * IPv6 one (mapped, translated, NAT64, 6to4, Teredo) are judged by the IPv4 address they lead to.
 */
import ipaddr from 'ipaddr.js';

/**
 * `public` is the only range the guard lets through by default. The rest are ipaddr.js's range
 * names (`loopback`, `private`, `linkLocal`, `uniqueLocal`, `multicast`, `unspecified`,
 * `broadcast`, `reserved`, `carrierGradeNat`, …) plus `cloudMetadata`.
 */
export type AddressRange = 'public' | 'cloudMetadata' | (string & {});

export interface AddressClass {
  /** The address in canonical form (IPv6 compressed, no brackets). */
  address: string;
  family: 4 | 6;
  range: AddressRange;
  /** Set when an IPv6 address embeds the IPv4 address that decided the range. */
  embeddedIPv4?: string;
  /** How the IPv4 address was embedded: `ipv4Mapped`, `rfc6145`, `rfc6052`, `6to4`, `teredo`. */
  via?: string;
}

/**
 * Instance metadata services that hand out cloud credentials. They stay blocked even with
 * `allowPrivateNetworks: true`; only an explicit allowHosts entry reaches them.
 */
export const CLOUD_METADATA_ADDRESSES: ReadonlySet<string> = new Set([
  '169.254.169.254', // AWS, GCP, Azure, OpenStack, DigitalOcean, …
  '169.254.169.253', // AWS VPC DNS
  '169.254.170.2', // AWS ECS task metadata
  '169.254.170.23', // AWS EKS pod identity
  '100.100.100.200', // Alibaba Cloud
  '192.0.0.192', // Oracle Cloud (legacy)
  'fd00:ec2::254', // AWS IMDS over IPv6
  'fd00:ec2::23', // AWS EKS pod identity over IPv6
]);

/** Host names of metadata services (lower case, no trailing dot). */
export const CLOUD_METADATA_HOSTS: ReadonlySet<string> = new Set([
  'metadata.google.internal',
  'metadata.goog',
  'metadata',
  'instance-data',
  'instance-data.ec2.internal',
  'metadata.azure.internal',
  'metadata.tencentyun.com',
]);

/** The global unicast block 2000::/3: IPv6 outside it is not routable on the internet. */
const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3') as [ipaddr.IPv6, number];

/** Parses a literal IP address (IPv6 with or without brackets); undefined if it is not one. */
export function parseIp(text: string): ipaddr.IPv4 | ipaddr.IPv6 | undefined {
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  // Zone ids (fe80::1%eth0) name an interface: never a public destination.
  if (bare.includes('%')) return undefined;
  // Only strict forms here: legacy IPv4 spellings (0x7f.1, 2130706433) are normalised by the
  // WHATWG URL parser before they reach us, and a DNS answer is always dotted-quad.
  if (ipaddr.IPv4.isValidFourPartDecimal(bare)) return ipaddr.IPv4.parse(bare);
  if (!bare.includes(':')) return undefined;
  // ipaddr.js reads any dotted tail as IPv4-mapped (::1.2.3.4 becomes ::ffff:1.2.3.4); spell
  // the tail in hex so the address stays what the socket would connect to.
  const tail = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(bare);
  let v6 = bare;
  if (tail) {
    if (!ipaddr.IPv4.isValidFourPartDecimal(tail[2]!)) return undefined;
    const o = ipaddr.IPv4.parse(tail[2]!).octets;
    v6 = `${tail[1]}${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  return ipaddr.IPv6.isValid(v6) ? ipaddr.IPv6.parse(v6) : undefined;
}

function v4FromParts(hi: number, lo: number): ipaddr.IPv4 {
  return new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]);
}

function classifyV4(ip: ipaddr.IPv4): string {
  const canonical = ip.toString();
  if (CLOUD_METADATA_ADDRESSES.has(canonical)) return 'cloudMetadata';
  const range = ip.range();
  return range === 'unicast' ? 'public' : range;
}

/** The IPv4 address an IPv6 address leads to, if it embeds one, and how. */
function embeddedV4(
  ip: ipaddr.IPv6,
  range: string,
): { v4: ipaddr.IPv4[]; via: string } | undefined {
  const p = ip.parts;
  switch (range) {
    case 'ipv4Mapped': // ::ffff:a.b.c.d
    case 'rfc6145': // ::ffff:0:a.b.c.d (SIIT)
      return { v4: [v4FromParts(p[6]!, p[7]!)], via: range };
    case 'rfc6052':
      // Only the well-known NAT64 prefix 64:ff9b::/96 has a fixed layout; the local-use
      // prefix 64:ff9b:1::/48 stays blocked as a whole (range rfc6052).
      if (p[2] === 0 && p[3] === 0 && p[4] === 0 && p[5] === 0) {
        return { v4: [v4FromParts(p[6]!, p[7]!)], via: range };
      }
      return undefined;
    case '6to4': // 2002:AABB:CCDD::/48
      return { v4: [v4FromParts(p[1]!, p[2]!)], via: range };
    case 'teredo': // 2001:0:SERVER:flags:port:~CLIENT
      return {
        v4: [v4FromParts(p[2]!, p[3]!), v4FromParts(~p[6]! & 0xffff, ~p[7]! & 0xffff)],
        via: range,
      };
    default:
      return undefined;
  }
}

function classifyParsed(ip: ipaddr.IPv4 | ipaddr.IPv6): AddressClass {
  if (ip.kind() === 'ipv4') {
    const v4 = ip as ipaddr.IPv4;
    return { address: v4.toString(), family: 4, range: classifyV4(v4) };
  }
  const v6 = ip as ipaddr.IPv6;
  const address = v6.toString();
  if (CLOUD_METADATA_ADDRESSES.has(address)) return { address, family: 6, range: 'cloudMetadata' };
  const range = v6.range();
  const embedded = embeddedV4(v6, range);
  if (embedded) {
    // The first embedded address that is not public decides; otherwise the address is public.
    for (const v4 of embedded.v4) {
      const r = classifyV4(v4);
      if (r !== 'public') {
        return { address, family: 6, range: r, embeddedIPv4: v4.toString(), via: embedded.via };
      }
    }
    return {
      address,
      family: 6,
      range: 'public',
      embeddedIPv4: embedded.v4[0]!.toString(),
      via: embedded.via,
    };
  }
  if (range !== 'unicast') return { address, family: 6, range };
  // ipaddr.js calls all of the unassigned space (including IPv4-compatible ::a.b.c.d) unicast.
  if (!v6.match(GLOBAL_UNICAST_V6)) return { address, family: 6, range: 'reserved' };
  return { address, family: 6, range: 'public' };
}

/**
 * Classifies a literal IP address. Anything that is not a valid literal (including zone ids)
 * comes back as range `invalid`, which the guard treats like any other blocked range.
 */
export function classifyAddress(text: string): AddressClass {
  const ip = parseIp(text);
  if (!ip) return { address: text, family: text.includes(':') ? 6 : 4, range: 'invalid' };
  return classifyParsed(ip);
}

/** True for names that always mean this machine (RFC 6761): `localhost` and `*.localhost`. */
export function isLocalhostName(host: string): boolean {
  return host === 'localhost' || host.endsWith('.localhost');
}

/** Lower case, without the trailing dot of a fully qualified name. */
export function normalizeHostName(host: string): string {
  const lower = host.toLowerCase();
  return lower.endsWith('.') ? lower.slice(0, -1) : lower;
}
