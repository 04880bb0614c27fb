/**
 * `policy.http.allowHosts`: the operator's exceptions to the SSRF guard. An entry is
 *   - a host name, `api.internal`, or every name below one, `*.corp.example`;
 *   - an IP address, `10.1.2.3` or `[fd00::1]` (or bare `fd00::1`);
 *   - a CIDR block, `10.0.0.0/8`, `fd00::/8`;
 * each optionally followed by `:port` (not for CIDR blocks) to open only that port.
 * A name entry trusts DNS for that name: whatever it resolves to is reachable. An address or
 * CIDR entry opens those addresses under any name that resolves to them.
 */
import ipaddr from 'ipaddr.js';
import { normalizeHostName, parseIp } from './address-ranges.js';

interface NameRule {
  kind: 'name';
  name: string;
  /** `*.name`: every name strictly below `name`. */
  subdomains: boolean;
  port?: number;
  entry: string;
}

interface AddressRule {
  kind: 'address';
  cidr: [ipaddr.IPv4 | ipaddr.IPv6, number];
  port?: number;
  entry: string;
}

type Rule = NameRule | AddressRule;

export class InvalidAllowHostError extends Error {
  readonly entry: string;

  constructor(entry: string, reason: string) {
    super(`policy.http.allowHosts: invalid entry "${entry}": ${reason}`);
    this.name = 'InvalidAllowHostError';
    this.entry = entry;
  }
}

function parsePort(text: string, entry: string): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1 || Number(text) > 65535) {
    throw new InvalidAllowHostError(entry, `"${text}" is not a port number`);
  }
  return Number(text);
}

function parseEntry(raw: string): Rule {
  const entry = raw.trim();
  if (entry === '') throw new InvalidAllowHostError(raw, 'empty');
  if (entry.includes('/')) {
    if (!ipaddr.isValidCIDR(entry)) throw new InvalidAllowHostError(entry, 'not a CIDR block');
    const [addr, bits] = ipaddr.parseCIDR(entry);
    return { kind: 'address', cidr: [addr, bits], entry };
  }
  // [v6] or [v6]:port
  const bracketed = /^\[([^\]]+)\](?::(.*))?$/.exec(entry);
  if (bracketed) {
    const ip = parseIp(bracketed[1]!);
    if (!ip || ip.kind() !== 'ipv6') throw new InvalidAllowHostError(entry, 'not an IPv6 address');
    const port = bracketed[2] === undefined ? undefined : parsePort(bracketed[2], entry);
    return { kind: 'address', cidr: [ip, 128], port, entry };
  }
  // A bare IPv6 address has more than one colon.
  if ((entry.match(/:/g) ?? []).length > 1) {
    const ip = parseIp(entry);
    if (!ip) throw new InvalidAllowHostError(entry, 'not an IPv6 address');
    return { kind: 'address', cidr: [ip, 128], entry };
  }
  const colon = entry.lastIndexOf(':');
  const hostPart = colon === -1 ? entry : entry.slice(0, colon);
  const port = colon === -1 ? undefined : parsePort(entry.slice(colon + 1), entry);
  const subdomains = hostPart.startsWith('*.');
  const bare = subdomains ? hostPart.slice(2) : hostPart;
  // The URL parser gives the same form the request URL will have (lower case, punycode,
  // legacy IPv4 spellings normalised), so entries and URLs compare equal.
  let hostname: string;
  try {
    hostname = new URL(`http://${bare}/`).hostname;
  } catch {
    throw new InvalidAllowHostError(entry, 'not a host name');
  }
  if (hostname === '' || /[/?#@\s]/.test(bare)) {
    throw new InvalidAllowHostError(entry, 'not a host name');
  }
  const ip = parseIp(hostname);
  if (ip) {
    if (subdomains) throw new InvalidAllowHostError(entry, '"*." applies to names, not addresses');
    return { kind: 'address', cidr: [ip, ip.kind() === 'ipv4' ? 32 : 128], port, entry };
  }
  return { kind: 'name', name: normalizeHostName(hostname), subdomains, port, entry };
}

/** The parsed allowHosts list. Invalid entries fail construction, naming the entry. */
export class AllowHosts {
  private readonly rules: Rule[];

  constructor(entries: readonly string[]) {
    this.rules = entries.map(parseEntry);
  }

  get size(): number {
    return this.rules.length;
  }

  /** The entry that opens host name `host` on `port`, if any. */
  matchName(host: string, port: number): string | undefined {
    const name = normalizeHostName(host);
    for (const rule of this.rules) {
      if (rule.kind !== 'name' || (rule.port !== undefined && rule.port !== port)) continue;
      if (rule.subdomains ? name.endsWith(`.${rule.name}`) : name === rule.name) return rule.entry;
    }
    return undefined;
  }

  /** The entry that opens IP address `address` on `port`, if any. */
  matchAddress(address: string, port: number): string | undefined {
    const ip = parseIp(address);
    if (!ip) return undefined;
    // An IPv4-mapped IPv6 address matches IPv4 entries too.
    const v4 =
      ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress()
        ? (ip as ipaddr.IPv6).toIPv4Address()
        : undefined;
    for (const rule of this.rules) {
      if (rule.kind !== 'address' || (rule.port !== undefined && rule.port !== port)) continue;
      const [net, bits] = rule.cidr;
      for (const candidate of v4 ? [ip, v4] : [ip]) {
        if (candidate.kind() === net.kind() && candidate.match(net, bits)) return rule.entry;
      }
    }
    return undefined;
  }
}
