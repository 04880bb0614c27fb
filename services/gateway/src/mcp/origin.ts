/**
 * Which browser pages may talk to POST /mcp. A page on another site — or one that DNS-rebinds
 * its own name to this gateway — makes the browser send its Origin; those are refused before
 * the MCP layer sees them. Clients outside a browser send no Origin and pass (docs/mcp.md).
 */

/** Loopback names a development gateway answers to (it binds 127.0.0.1 only). */
const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

export interface OriginVerdict {
  ok: boolean;
  /** Why not, for the 403 body. */
  reason?: string;
}

interface AllowedOrigin {
  protocol: string;
  hostname: string;
  /** undefined: any port. */
  port: string | undefined;
}

export class OriginPolicy {
  private readonly allowed: AllowedOrigin[];

  /**
   * `allowedOrigins` as configured (`server.allowedOrigins`). Empty means: in development
   * mode localhost pages on any port, otherwise no page at all. `dev` also pins the Host
   * header to loopback names, the DNS-rebinding guard for a gateway on 127.0.0.1.
   */
  constructor(
    allowedOrigins: readonly string[],
    private readonly dev: boolean,
  ) {
    this.allowed = allowedOrigins.map(parseAllowed);
  }

  check(origin: string | undefined, host: string | undefined): OriginVerdict {
    if (this.dev) {
      const hostname = hostnameOf(host);
      if (hostname === undefined || !LOOPBACK.has(hostname)) {
        return { ok: false, reason: `Host ${JSON.stringify(host ?? '')} is not a loopback name` };
      }
    }
    if (origin === undefined || origin === '') return { ok: true };
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      return { ok: false, reason: `Origin ${JSON.stringify(origin)} is not a URL` };
    }
    if (this.allowed.length === 0 && this.dev) {
      return LOOPBACK.has(url.hostname)
        ? { ok: true }
        : { ok: false, reason: `Origin ${origin} is not a localhost page (development mode)` };
    }
    const port = url.port || (url.protocol === 'https:' ? '443' : '80');
    const ok = this.allowed.some(
      (a) =>
        a.protocol === url.protocol &&
        a.hostname === url.hostname &&
        (a.port === undefined || a.port === port),
    );
    return ok
      ? { ok: true }
      : { ok: false, reason: `Origin ${origin} is not in server.allowedOrigins` };
  }
}

/** `scheme://host[:port]`, `:*` for any port (the config schema checked the shape). */
function parseAllowed(entry: string): AllowedOrigin {
  const wildcard = entry.endsWith(':*');
  let url: URL;
  try {
    url = new URL(wildcard ? entry.slice(0, -2) : entry);
  } catch {
    throw new Error(`server.allowedOrigins: ${JSON.stringify(entry)} is not scheme://host[:port]`);
  }
  return {
    protocol: url.protocol,
    hostname: url.hostname,
    port: wildcard ? undefined : url.port || (url.protocol === 'https:' ? '443' : '80'),
  };
}

function hostnameOf(host: string | undefined): string | undefined {
  if (!host) return undefined;
  try {
    return new URL(`http://${host}`).hostname;
  } catch {
    return undefined;
  }
}
