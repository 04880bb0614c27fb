/**
 * The SSRF guard (docs/spec.md §6): turns a URL into the exact addresses the request may connect to,
 * or refuses. The host is resolved once here and every address checked; the connection is
 * then pinned to these addresses (see pinnedLookup), so a second DNS answer cannot differ.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, type LookupFunction as NetLookupFunction } from 'node:net';
import { ToolError, type RequestOrigin } from '@toolgate/registry';
import {
  CLOUD_METADATA_HOSTS,
  classifyAddress,
  isLocalhostName,
  normalizeHostName,
  type AddressClass,
} from './address-ranges.js';
import { AllowHosts } from './allow-hosts.js';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address it has. Injected in tests; DNS by default. */
export type LookupFunction = (hostname: string, signal: AbortSignal) => Promise<ResolvedAddress[]>;

/** The part of `policy.http` the guard reads. */
export interface AddressPolicy {
  allowPrivateNetworks: boolean;
  allowHosts: readonly string[];
}

/** A URL whose every address passed the policy; the request must connect to one of these. */
export interface CheckedTarget {
  url: URL;
  /** Host name or literal address, IPv6 without brackets. */
  host: string;
  port: number;
  addresses: ResolvedAddress[];
}

/**
 * What credential rules are matched against (docs/credentials.md): the checked target's scheme,
 * host (as the URL writes it) and port, so a rule for an HTTPS API gives nothing to plain http
 * or another port of the same name.
 */
export function originOf(target: CheckedTarget): RequestOrigin {
  return {
    scheme: target.url.protocol === 'http:' ? 'http' : 'https',
    host: target.url.hostname,
    port: target.port,
  };
}

export const ALLOWED_PROTOCOLS: ReadonlySet<string> = new Set(['http:', 'https:']);

/** getaddrinfo through node:dns (honours /etc/hosts), every address, in the resolver's order. */
export const systemLookup: LookupFunction = async (hostname) => {
  const answers = await dnsLookup(hostname, { all: true, order: 'verbatim' });
  return answers.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

/** Parses a URL a model supplied: absolute http(s), no embedded credentials. */
export function parseHttpUrl(input: string, base?: URL): URL {
  let url: URL;
  try {
    url = base ? new URL(input, base) : new URL(input);
  } catch {
    throw new ToolError('invalid_url', `"${truncate(input)}" is not a valid absolute URL`);
  }
  if (!ALLOWED_PROTOCOLS.has(url.protocol)) {
    throw new ToolError(
      'invalid_url',
      `only http and https URLs are allowed, not ${url.protocol.slice(0, -1)}:`,
      { details: { protocol: url.protocol } },
    );
  }
  if (url.username || url.password) {
    throw new ToolError(
      'invalid_url',
      'credentials in the URL are not supported; send an Authorization header instead',
    );
  }
  if (url.hostname === '') throw new ToolError('invalid_url', 'the URL has no host');
  return url;
}

function truncate(s: string, max = 200): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

function effectivePort(url: URL): number {
  if (url.port) return Number(url.port);
  return url.protocol === 'https:' ? 443 : 80;
}

function describeRange(c: AddressClass): string {
  const via = c.embeddedIPv4 ? ` (embeds ${c.embeddedIPv4} via ${c.via})` : '';
  return `${c.range}${via}`;
}

function blocked(host: string, c: AddressClass, port: number): ToolError {
  const what = host === c.address ? c.address : `"${host}" resolves to ${c.address}, which is`;
  return new ToolError(
    'blocked_address',
    `refused: ${what} in a blocked range: ${describeRange(c)}. Only public internet addresses ` +
      'may be fetched unless the operator allows the host in policy.http.allowHosts',
    {
      details: {
        host,
        port,
        address: c.address,
        range: c.range,
        ...(c.embeddedIPv4 ? { embeddedIPv4: c.embeddedIPv4, via: c.via } : {}),
      },
    },
  );
}

export class AddressGuard {
  private readonly allowHosts: AllowHosts;
  private readonly allowPrivateNetworks: boolean;

  constructor(
    policy: AddressPolicy,
    private readonly lookup: LookupFunction = systemLookup,
  ) {
    this.allowHosts = new AllowHosts(policy.allowHosts);
    this.allowPrivateNetworks = policy.allowPrivateNetworks;
  }

  /** Resolves `url`'s host and checks every address; throws `blocked_address` if any fails. */
  async check(url: URL, signal: AbortSignal): Promise<CheckedTarget> {
    if (!ALLOWED_PROTOCOLS.has(url.protocol)) {
      throw new ToolError(
        'invalid_url',
        `only http and https URLs are allowed, not ${url.protocol}`,
      );
    }
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    const port = effectivePort(url);
    const literal = isIP(host);
    const allowedName = literal ? undefined : this.allowHosts.matchName(host, port);

    let addresses: ResolvedAddress[];
    if (literal) {
      addresses = [{ address: host, family: literal === 6 ? 6 : 4 }];
    } else if (CLOUD_METADATA_HOSTS.has(normalizeHostName(host)) && !allowedName) {
      throw new ToolError(
        'blocked_address',
        `refused: "${host}" is a cloud metadata service name`,
        { details: { host, port, address: host, range: 'cloudMetadata' } },
      );
    } else if (isLocalhostName(normalizeHostName(host))) {
      // RFC 6761: never ask DNS about localhost names; they are this machine.
      addresses = [
        { address: '127.0.0.1', family: 4 },
        { address: '::1', family: 6 },
      ];
    } else {
      addresses = await this.resolve(host, signal);
    }

    for (const a of addresses) {
      const c = classifyAddress(a.address);
      if (c.range === 'invalid') {
        throw new ToolError(
          'http_error',
          `the resolver returned an invalid address for "${host}"`,
          {
            details: { host, address: a.address },
          },
        );
      }
      if (allowedName) continue;
      if (c.range === 'public') continue;
      if (this.allowHosts.matchAddress(c.address, port)) continue;
      if (this.allowPrivateNetworks && c.range !== 'cloudMetadata') continue;
      throw blocked(host, c, port);
    }
    return { url, host, port, addresses };
  }

  private async resolve(host: string, signal: AbortSignal): Promise<ResolvedAddress[]> {
    let answers: ResolvedAddress[];
    try {
      answers = await raceAbort(this.lookup(host, signal), signal);
    } catch (err) {
      if (signal.aborted) throw err;
      const code = (err as NodeJS.ErrnoException).code;
      throw new ToolError(
        'http_error',
        `could not resolve host "${host}"${code ? ` (${code})` : ''}`,
        {
          details: { host, reason: 'dns', ...(code ? { code } : {}) },
          cause: err,
        },
      );
    }
    if (answers.length === 0) {
      throw new ToolError('http_error', `host "${host}" has no addresses`, {
        details: { host, reason: 'dns' },
      });
    }
    return answers.map((a) => ({ address: a.address, family: isIP(a.address) === 6 ? 6 : 4 }));
  }
}

/** Settles with `promise`, or rejects with the signal's reason as soon as it aborts. */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e as Error);
      },
    );
  });
}

/**
 * A `lookup` for net/tls.connect that answers only with the checked addresses, so the socket
 * goes where the guard looked — no second DNS query. Any other host name is refused.
 */
export function pinnedLookup(target: CheckedTarget): NetLookupFunction {
  const expected = normalizeHostName(target.host);
  return (hostname, options, callback) => {
    const fail = (message: string) =>
      callback(Object.assign(new Error(message), { code: 'ENOTFOUND' }), '', 0);
    if (normalizeHostName(hostname) !== expected) return fail(`unexpected lookup of ${hostname}`);
    const family =
      options.family === 4 || options.family === 'IPv4'
        ? 4
        : options.family === 6 || options.family === 'IPv6'
          ? 6
          : 0;
    const list = family ? target.addresses.filter((a) => a.family === family) : target.addresses;
    if (list.length === 0) return fail(`no IPv${family} address for ${hostname}`);
    if (options.all) {
      (callback as unknown as (err: null, all: ResolvedAddress[]) => void)(
        null,
        list.map((a) => ({ address: a.address, family: a.family })),
      );
    } else {
      callback(null, list[0]!.address, list[0]!.family);
    }
  };
}
