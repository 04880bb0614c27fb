/**
 * The egress filter of network-enabled sandboxes (manifest tools with `network: true`): an
 * HTTP proxy that lets a sandbox reach only what the http tools may reach. Each destination —
 * a CONNECT tunnel (https and anything else over TCP) or a plain http request — goes through
 * the same SSRF guard (`policy.http`), and the socket goes to the checked address. Sandboxes
 * sit on an internal Docker network whose only way out is this proxy (packages/sandbox
 * egress.ts), so a program that ignores HTTP_PROXY reaches nothing.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { connect, isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket, rootCertificates } from 'node:tls';
import { ToolError, type CallCredentials } from '@toolgate/registry';
import { EgressCa } from './egress-ca.js';
import {
  AddressGuard,
  originOf,
  type AddressPolicy,
  type CheckedTarget,
  type LookupFunction,
} from './address-guard.js';

export interface EgressProxyOptions {
  /** Address to listen on (the sandbox network's gateway). */
  host: string;
  port?: number;
  policy: AddressPolicy;
  /**
   * Tunnels and requests open at once on this worker; more are answered 503. Default 256
   * (`sandbox.egress.maxConnections`).
   */
  maxConnections?: number;
  /**
   * Tunnels and requests one client may hold at once: its share of maxConnections, so a
   * client at its share leaves the rest to the others. Default maxConnections / 4 (64;
   * `sandbox.egress.maxConnectionsPerClient`).
   */
  maxConnectionsPerClient?: number;
  /**
   * Whose sandbox a connection comes from, by its source address (the driver registers each
   * network-enabled container's address with its client). Undefined: not a sandbox of this
   * worker, refused. Without it every connection counts as one client's.
   */
  identify?: (address: string) => string | undefined;
  /** A tunnel or request idle this long is closed. */
  idleTimeoutMs?: number;
  /**
   * The credential rules of the call whose sandbox has this source address (the driver
   * registers them with the address; docs/credentials.md). Plain http requests to an origin
   * (scheme, host, port) with a rule get its headers; a CONNECT to an https origin with one is
   * terminated with `ca`, and each request in it that names that origin only is forwarded.
   */
  credentialsOf?: (address: string) => CallCredentials | undefined;
  /**
   * Where the bytes relayed for the sandbox with this source address go (the driver registers
   * one meter per run with the address; docs/budgets.md): every byte of a tunnel either way,
   * and the request and response bodies of plain http and of terminated HTTPS. Looked up once
   * per connection, when it is admitted.
   */
  meterOf?: (address: string) => EgressMeter | undefined;
  /** The CA that terminates HTTPS to hosts with a rule; made here when credentialsOf is given. */
  ca?: EgressCa;
  /**
   * CAs trusted for the real hosts behind terminated HTTPS, besides the public roots Node
   * ships (a deployment's internal CA; tests' own servers).
   */
  upstreamCa?: readonly string[];
  lookup?: LookupFunction;
  log?: { warn(obj: object, msg?: string): void; debug(obj: object, msg?: string): void };
}

/** Counts the payload bytes the proxy relays for one sandbox run. */
export interface EgressMeter {
  add(bytes: number): void;
}

export interface EgressProxy {
  host: string;
  port: number;
  /** What sandboxes put in HTTP_PROXY / HTTPS_PROXY. */
  url: string;
  /**
   * What sandboxes trust when credential rules are on: the public roots plus this proxy's CA
   * (PEM). Undefined: no HTTPS is ever terminated.
   */
  caBundle?: string;
  /**
   * Closes every connection from a source address (its sandbox is gone): its tunnels leave the
   * client's share at once, and an address Docker hands to the next container starts clean.
   */
  disconnect(address: string): void;
  close(): Promise<void>;
}

/** Adds a relayed chunk to the meter of the sandbox it was relayed for. */
type Count = (chunk: Buffer) => void;

const CHECK_TIMEOUT_MS = 10_000;
/** Headers of one connection (RFC 9110 §7.6.1), never passed on by terminated HTTPS. */
const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
];
const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  421: 'Misdirected Request',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
};

export async function startEgressProxy(options: EgressProxyOptions): Promise<EgressProxy> {
  const guard = new AddressGuard(options.policy, options.lookup);
  const maxConnections = options.maxConnections ?? 256;
  const perClient = Math.max(
    1,
    Math.min(maxConnections, options.maxConnectionsPerClient ?? Math.floor(maxConnections / 4)),
  );
  const idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
  const identify = options.identify ?? (() => '');
  const credentialsOf = options.credentialsOf;
  const meterOf = options.meterOf;
  const ca = options.ca ?? (credentialsOf ? new EgressCa() : undefined);
  const upstreamCa = options.upstreamCa?.length
    ? [...rootCertificates, ...options.upstreamCa]
    : undefined;
  // Terminated HTTPS reuses its connections to the real hosts: one TLS handshake per host and
  // address, not per request (the header goes per request; the connection carries no identity).
  const upstreamAgent = new HttpsAgent({ keepAlive: true, maxSockets: 64, maxFreeSockets: 16 });
  const log = options.log;
  let open = 0;
  /** Tunnels and requests open now, per client. */
  const openOf = new Map<string, number>();
  /** Every socket open now, per source address (for disconnect). */
  const sockets = new Map<string, Set<Socket>>();

  /**
   * Takes one of the worker's connections for the client behind `socket`; returns the release
   * (call it once, on close) or why not. Synchronous: no await between the check and the count.
   */
  const admit = (
    socket: Socket,
  ): { release: () => void; count: Count } | { status: number; reason: string } => {
    const source = sourceOf(socket);
    const client = identify(source);
    if (client === undefined)
      return { status: 403, reason: 'refused: not a sandbox of this worker' };
    const mine = openOf.get(client) ?? 0;
    if (mine >= perClient)
      return {
        status: 503,
        reason: `too many connections: this client holds its share (${perClient})`,
      };
    if (open >= maxConnections) return { status: 503, reason: 'too many connections' };
    open++;
    openOf.set(client, mine + 1);
    let released = false;
    const meter = meterOf?.(source);
    return {
      count: meter ? (chunk) => meter.add(chunk.length) : () => undefined,
      release: () => {
        if (released) return;
        released = true;
        open--;
        const left = (openOf.get(client) ?? 1) - 1;
        if (left > 0) openOf.set(client, left);
        else openOf.delete(client);
      },
    };
  };

  const check = async (url: URL): Promise<CheckedTarget> =>
    guard.check(url, AbortSignal.timeout(CHECK_TIMEOUT_MS));

  const refuse = (socket: Duplex, status: number, reason: string) => {
    const body = `toolgate egress: ${reason}\n`;
    // Closed once written: a client that keeps its half open would otherwise keep the slot.
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\n` +
        `content-type: text/plain\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      () => socket.destroy(),
    );
  };
  const reasonOf = (err: unknown) =>
    err instanceof ToolError ? err.message : `could not check the destination: ${String(err)}`;

  const server: Server = createServer((req, res) => {
    // Plain http through the proxy: an absolute URI in the request line.
    let url: URL;
    try {
      url = new URL(req.url ?? '');
      if (url.protocol !== 'http:') throw new Error('not http');
    } catch {
      res
        .writeHead(400, { 'content-type': 'text/plain' })
        .end('toolgate egress: absolute http:// URL expected\n');
      return;
    }
    const slot = admit(req.socket);
    if (!('release' in slot)) {
      res
        .writeHead(slot.status, { 'content-type': 'text/plain' })
        .end(`toolgate egress: ${slot.reason}\n`);
      return;
    }
    res.once('close', slot.release);
    const credentials = credentialsOf?.(sourceOf(req.socket));
    check(url)
      .then(async (target) => {
        // After the guard: only a destination it passed gets the header, and only a rule for
        // plain http on this port (one for the HTTPS API of the same name gives nothing here).
        const origin = originOf(target);
        const added = credentials?.covers(origin) ? await credentials.headersFor(origin) : [];
        forward(req, res, target, added, slot.count);
      })
      .catch((err: unknown) => {
        log?.debug({ url: url.origin, reason: reasonOf(err) }, 'egress refused');
        res
          .writeHead(403, { 'content-type': 'text/plain' })
          .end(`toolgate egress: ${reasonOf(err)}\n`);
      });
  });

  const forward = (
    req: IncomingMessage,
    res: import('node:http').ServerResponse,
    target: CheckedTarget,
    added: [string, string][],
    count: Count,
  ) => {
    const headers = { ...req.headers };
    delete headers['proxy-connection'];
    delete headers['proxy-authorization'];
    // A rule's header replaces whatever the sandbox sent under that name.
    for (const [name, value] of added) headers[name] = value;
    const upstream = httpRequest({
      host: target.addresses[0]!.address,
      port: target.port,
      method: req.method,
      path: `${target.url.pathname}${target.url.search}`,
      headers: { ...headers, host: target.url.host },
      timeout: idleTimeoutMs,
    });
    upstream.on('response', (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.on('data', count);
      up.pipe(res);
    });
    upstream.on('timeout', () => upstream.destroy(new Error('upstream timed out')));
    upstream.on('error', (err) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`toolgate egress: ${err.message}\n`);
    });
    req.on('data', count);
    req.pipe(upstream);
  };

  server.on('connect', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    client.on('error', () => undefined);
    const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(req.url ?? '');
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) {
      refuse(client, 400, 'CONNECT host:port expected');
      return;
    }
    let url: URL;
    try {
      // The guard speaks URLs; https:// only picks its default port, the port is explicit.
      url = new URL(`https://${m[1]}:${m[2]}/`);
    } catch {
      refuse(client, 400, 'invalid CONNECT target');
      return;
    }
    const slot = admit(req.socket);
    if (!('release' in slot)) {
      refuse(client, slot.status, slot.reason);
      return;
    }
    client.once('close', slot.release);
    // A client that gives up before its tunnel opens (half-closes: the server allows half-open
    // sockets) is gone: free its connection now, not when the upstream attempt times out.
    const gaveUp = () => client.destroy();
    client.once('end', gaveUp);
    const credentials = credentialsOf?.(sourceOf(req.socket));
    check(url).then(
      (target) => {
        // A tunnel is https to this port as far as rules go: terminated only for a rule that
        // names https, this host and this port.
        if (ca && credentials?.covers(originOf(target))) {
          client.off('end', gaveUp);
          terminate(client as Socket, head, target, credentials, ca, slot.count);
          return;
        }
        const upstream: Socket = connect({
          host: target.addresses[0]!.address,
          port: Number(m[2]),
        });
        let connected = false;
        upstream.setTimeout(idleTimeoutMs, () => upstream.destroy());
        client.once('close', () => upstream.destroy());
        upstream.once('error', (err) => {
          if (!connected) refuse(client, 502, err.message);
        });
        upstream.once('close', () => {
          if (connected) client.destroy();
        });
        upstream.once('connect', () => {
          connected = true;
          client.off('end', gaveUp);
          client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
          if (head.length > 0) {
            slot.count(head);
            upstream.write(head);
          }
          upstream.on('data', slot.count);
          client.on('data', slot.count);
          upstream.pipe(client);
          client.pipe(upstream);
        });
      },
      (err: unknown) => {
        log?.debug({ target: req.url, reason: reasonOf(err) }, 'egress refused');
        refuse(client, 403, reasonOf(err));
      },
    );
  });
  /**
   * HTTPS to a host with a credential rule: the proxy answers the sandbox's TLS itself, with a
   * certificate for that host from its CA (which only sandboxes trust), reads each request,
   * adds the rule's headers and sends it on to the checked address over a new TLS connection
   * that verifies the real host's certificate as any client would.
   */
  const terminated = new WeakMap<
    object,
    { target: CheckedTarget; credentials: CallCredentials; count: Count }
  >();
  const inner = createServer((req, res) => {
    const info = terminated.get(req.socket);
    if (!info) {
      res.writeHead(400).end();
      return;
    }
    const { target, credentials, count } = info;
    const host = target.url.hostname;
    const bare = host.replace(/^\[|\]$/g, '');
    // The tunnel was checked, and its credential is meant, for one origin: a request that names
    // another (an absolute-form target, a Host) is answered here, never forwarded.
    const within = pathWithin(req, target);
    if ('reason' in within) {
      log?.debug({ host, reason: within.reason }, 'egress refused');
      res
        .writeHead(within.status, { 'content-type': 'text/plain', connection: 'close' })
        .end(`toolgate egress: ${within.reason}\n`);
      return;
    }
    credentials.headersFor(originOf(target)).then(
      (added) => {
        const headers = { ...req.headers };
        // Hop-by-hop: about the sandbox's connection to the proxy, not the proxy's to the host
        // (whose kept-alive connection serves every sandbox's next request).
        for (const name of HOP_BY_HOP) delete headers[name];
        for (const [name, value] of added) headers[name] = value;
        // The request goes to the host the tunnel was opened (and checked) for, whatever Host
        // the sandbox wrote inside it.
        headers.host = target.url.host;
        const upstream = httpsRequest({
          host: target.addresses[0]!.address,
          port: target.port,
          method: req.method,
          path: within.path,
          headers,
          agent: upstreamAgent,
          // The certificate is checked against servername (a name), else against the address
          // connected to, which for an IP host is that IP. (A checkServerIdentity option
          // would do the same but keeps the agent from reusing connections.)
          ...(isIP(bare) ? {} : { servername: bare }),
          ...(upstreamCa ? { ca: upstreamCa } : {}),
          timeout: idleTimeoutMs,
        });
        upstream.on('response', (up) => {
          const answer = { ...up.headers };
          for (const name of HOP_BY_HOP) delete answer[name];
          res.writeHead(up.statusCode ?? 502, answer);
          up.on('data', count);
          up.pipe(res);
        });
        upstream.on('timeout', () => upstream.destroy(new Error('upstream timed out')));
        upstream.on('error', (err) => {
          log?.debug({ host, reason: err.message }, 'egress upstream failed');
          if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
          res.end(`toolgate egress: ${host}: ${err.message}\n`);
        });
        req.on('data', count);
        req.pipe(upstream);
      },
      (err: unknown) => {
        // credential_missing and the like: the sandbox's client reads why.
        res
          .writeHead(403, { 'content-type': 'text/plain' })
          .end(`toolgate egress: ${reasonOf(err)}\n`);
      },
    );
  });
  // A tunnel inside a terminated tunnel would reach what the guard never saw.
  inner.on('connect', (_req: IncomingMessage, socket: Duplex) =>
    refuse(socket, 400, 'CONNECT inside a tunnel is refused'),
  );
  // A request the parser refuses (a target that is neither a path nor a URL, bad framing) is
  // answered, so the sandbox's client reads why; a connection that broke is only closed.
  inner.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (socket.writable && err.code?.startsWith('HPE_'))
      refuse(socket, 400, `malformed request (${err.code})`);
    else socket.destroy();
  });
  inner.headersTimeout = 10_000;
  inner.requestTimeout = 0;

  const terminate = (
    client: Socket,
    head: Buffer,
    target: CheckedTarget,
    credentials: CallCredentials,
    authority: EgressCa,
    count: Count,
  ) => {
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) client.unshift(head);
    const tls = new TLSSocket(client, {
      isServer: true,
      secureContext: authority.contextFor(target.url.hostname.replace(/^\[|\]$/g, '')),
      ALPNProtocols: ['http/1.1'],
    });
    tls.on('error', () => client.destroy());
    tls.setTimeout(idleTimeoutMs, () => tls.destroy());
    client.once('close', () => tls.destroy());
    terminated.set(tls, { target, credentials, count });
    inner.emit('connection', tls);
  };

  server.on('connection', (socket: Socket) => {
    const source = sourceOf(socket);
    let set = sockets.get(source);
    if (!set) sockets.set(source, (set = new Set()));
    set.add(socket);
    socket.once('close', () => {
      set.delete(socket);
      if (set.size === 0 && sockets.get(source) === set) sockets.delete(source);
    });
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  server.headersTimeout = 10_000;
  server.requestTimeout = 0;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : (options.port ?? 0);
  const hostForUrl = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    host: options.host,
    port,
    url: `http://${hostForUrl}:${port}`,
    ...(ca ? { caBundle: ca.bundlePem } : {}),
    disconnect(address: string) {
      for (const socket of sockets.get(normalizeAddress(address)) ?? []) socket.destroy();
    },
    async close() {
      upstreamAgent.destroy();
      inner.closeAllConnections();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * Where a request read inside a tunnel terminated for `target` goes: its origin-form path, or
 * why it is refused. Every authority the request names must be the tunnel's — scheme https,
 * host and port — in an absolute-form target (`GET https://api.test/x`) and in Host alike: front
 * ends route by either, and the credential was added for this origin only.
 */
function pathWithin(
  req: IncomingMessage,
  target: CheckedTarget,
): { path: string } | { status: number; reason: string } {
  // url.host leaves out the default port, as a URL parsed from the request does.
  const own = `https://${target.url.host}`;
  const raw = req.url ?? '';
  let path: string;
  if (raw.startsWith('/')) {
    path = raw;
  } else if (raw === '*') {
    if (req.method !== 'OPTIONS')
      return { status: 400, reason: 'the request target "*" is for OPTIONS only' };
    path = raw;
  } else {
    let url: URL | undefined;
    try {
      url = new URL(raw);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:')) {
      return {
        status: 400,
        reason: `"${raw.slice(0, 200)}" is not a request target: write a path, or ${own}/…`,
      };
    }
    if (url.username || url.password)
      return { status: 400, reason: 'a request target with user information is refused' };
    if (url.origin !== own)
      return {
        status: 421,
        reason: `this tunnel is for ${own}; the request names ${url.origin}`,
      };
    path = `${url.pathname}${url.search}`;
  }
  const host = req.headers.host;
  if (host !== undefined && authorityOf(host) !== target.url.host) {
    return {
      status: 421,
      reason: `this tunnel is for ${own}; the Host header names ${host.slice(0, 200)}`,
    };
  }
  return { path };
}

/** A Host header's authority as a https URL writes it (lower case, no :443), if it is one. */
function authorityOf(host: string): string | undefined {
  if (!/^[^/\\?#@\s]+$/.test(host)) return undefined;
  try {
    return new URL(`https://${host}`).host;
  } catch {
    return undefined;
  }
}

/** The peer's address, IPv4-mapped IPv6 written as plain IPv4 (as the driver registers it). */
function sourceOf(socket: Socket): string {
  return normalizeAddress(socket.remoteAddress ?? '');
}

function normalizeAddress(address: string): string {
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}
