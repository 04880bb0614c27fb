/**
 * Credential injection by the egress proxy (docs/credentials.md), on loopback without Docker:
 * plain http to an origin with a rule gets the header; HTTPS to it is terminated with the
 * proxy's CA and forwarded to the real host, verified; HTTPS to any other origin stays an
 * opaque tunnel. A terminated tunnel serves only the origin it was opened for. The sandbox side
 * is undici's proxy client trusting what a sandbox trusts (`caBundle`), or a raw client for
 * requests no well-behaved client writes.
 */
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect as netConnect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { ToolError, type CallCredentials, type RequestOrigin } from '@toolgate/registry';
import { ProxyAgent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EgressCa } from './egress-ca.js';
import { startEgressProxy, type EgressProxy } from './egress-proxy.js';

const VALUE = 'proxy-secret-value-4711';

let upstreamCa: EgressCa;
let httpsServer: Server;
let httpsServer2: Server;
let httpServer: Server;
let httpsPort: number;
let httpsPort2: number;
let httpPort: number;
let proxy: EgressProxy;
/** What the proxy relayed for the one "sandbox" here (127.0.0.1), as a driver's meter hears it. */
const meter = {
  bytes: 0,
  add(n: number) {
    this.bytes += n;
  },
};
const seen: {
  host: string | undefined;
  url: string | undefined;
  headers: IncomingHttpHeaders;
  tls: boolean;
}[] = [];

/**
 * The origins the call's rules name, as a rule binds them (scheme, host, port): `api.test`
 * over both schemes, `tls-only.test` over HTTPS on one port only; `missing.test` names a secret
 * that is not set.
 */
const ruled = () =>
  new Set([
    `https://api.test:${httpsPort}`,
    `http://api.test:${httpPort}`,
    `https://missing.test:${httpsPort}`,
    `http://missing.test:${httpPort}`,
    `https://wrong.test:${httpsPort}`,
    `https://tls-only.test:${httpsPort}`,
  ]);
const key = (o: RequestOrigin) => `${o.scheme}://${o.host}:${o.port}`;
const credentials: CallCredentials = {
  covers: (origin) => ruled().has(key(origin)),
  headersFor: (origin) =>
    !ruled().has(key(origin))
      ? Promise.resolve([])
      : origin.host !== 'missing.test'
        ? Promise.resolve([['authorization', `Bearer ${VALUE}`]])
        : Promise.reject(
            new ToolError('credential_missing', 'requests to missing.test need the secret "nope"'),
          ),
};

beforeAll(async () => {
  // The real hosts: a plain http server, and an https one with a certificate from a CA of its
  // own (neither the proxy's nor a public one), which the proxy is told to trust.
  upstreamCa = new EgressCa('test upstream CA');
  const record =
    (tls: boolean) =>
    (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
      seen.push({ host: req.headers.host, url: req.url, headers: req.headers, tls });
      res.end('hello from upstream');
    };
  httpsServer = createHttpsServer(
    // wrong.test answers with a certificate for another name.
    {
      SNICallback: (name, cb) =>
        cb(null, upstreamCa.contextFor(name === 'wrong.test' ? 'other.test' : name)),
    },
    record(true),
  );
  httpsServer2 = createHttpsServer(
    { SNICallback: (name, cb) => cb(null, upstreamCa.contextFor(name)) },
    record(true),
  );
  httpServer = createHttpServer(record(false));
  httpsPort = await listen(httpsServer);
  httpsPort2 = await listen(httpsServer2);
  httpPort = await listen(httpServer);
  proxy = await startEgressProxy({
    host: '127.0.0.1',
    policy: {
      allowPrivateNetworks: false,
      allowHosts: ['api.test', 'plain.test', 'missing.test', 'wrong.test', 'tls-only.test'],
    },
    lookup: () => Promise.resolve([{ address: '127.0.0.1', family: 4 }]),
    credentialsOf: (address) => (address === '127.0.0.1' ? credentials : undefined),
    meterOf: (address) => (address === '127.0.0.1' ? meter : undefined),
    upstreamCa: [upstreamCa.certPem],
  });
});

afterAll(async () => {
  await proxy?.close();
  httpsServer?.close();
  httpsServer2?.close();
  httpServer?.close();
});

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as { port: number }).port;
}

/** A GET through the proxy, trusting `ca` for HTTPS (a sandbox trusts proxy.caBundle). */
async function get(url: string, ca?: string): Promise<{ status: number; body: string }> {
  const agent = new ProxyAgent({ uri: proxy.url, ...(ca ? { requestTls: { ca } } : {}) });
  try {
    const res = await request(url, { dispatcher: agent });
    return { status: res.statusCode, body: await res.body.text() };
  } finally {
    await agent.close();
  }
}

describe('egress proxy: credential injection', () => {
  it("counts a terminated request's bodies both ways into its sandbox's meter, not the TLS around them", async () => {
    const agent = new ProxyAgent({ uri: proxy.url, requestTls: { ca: proxy.caBundle! } });
    meter.bytes = 0;
    try {
      const res = await request(`https://api.test:${httpsPort}/upload`, {
        dispatcher: agent,
        method: 'POST',
        body: 'u'.repeat(1000),
      });
      expect(await res.body.text()).toBe('hello from upstream');
    } finally {
      await agent.close();
    }
    expect(seen.at(-1)?.headers.authorization).toBe(`Bearer ${VALUE}`);
    // 1,000 sent + 19 received, exactly: no handshake, record framing or header is charged.
    expect(meter.bytes).toBe(1000 + 'hello from upstream'.length);
  });

  it('adds the header to plain http for a host with a rule, not to another host', async () => {
    expect(await get(`http://api.test:${httpPort}/a`)).toEqual({
      status: 200,
      body: 'hello from upstream',
    });
    expect(seen.at(-1)?.headers.authorization).toBe(`Bearer ${VALUE}`);
    await get(`http://plain.test:${httpPort}/b`);
    expect(seen.at(-1)?.headers.authorization).toBeUndefined();
  });

  it('terminates HTTPS to a host with a rule, adds the header and verifies the real host', async () => {
    // What sandboxes trust: the public roots and the proxy's CA.
    expect(proxy.caBundle?.match(/-----BEGIN CERTIFICATE-----/g)?.length).toBeGreaterThan(100);
    const res = await get(`https://api.test:${httpsPort}/secure`, proxy.caBundle);
    expect(res).toEqual({ status: 200, body: 'hello from upstream' });
    expect(seen.at(-1)).toMatchObject({ tls: true, host: `api.test:${httpsPort}` });
    expect(seen.at(-1)?.headers.authorization).toBe(`Bearer ${VALUE}`);
    // A client that does not trust the proxy's CA (only the upstream's) is refused: the
    // certificate it was shown for api.test is the proxy's.
    await expect(get(`https://api.test:${httpsPort}/secure`, upstreamCa.certPem)).rejects.toThrow();
  });

  it('does not send the header to a host whose certificate does not match its name', async () => {
    const before = seen.length;
    const res = await get(`https://wrong.test:${httpsPort}/x`, proxy.caBundle);
    expect(res.status).toBe(502);
    expect(res.body).toMatch(/toolgate egress: wrong\.test: .*(altnames|certificate)/i);
    expect(seen.length).toBe(before);
  });

  it('tunnels HTTPS to a host without a rule untouched: the real certificate, no header', async () => {
    const before = seen.length;
    // Trusting only the upstream's CA works: the TLS session is the real host's, end to end.
    const res = await get(`https://plain.test:${httpsPort}/tunnel`, upstreamCa.certPem);
    expect(res.status).toBe(200);
    expect(seen.length).toBe(before + 1);
    expect(seen.at(-1)?.headers.authorization).toBeUndefined();
  });

  it('refuses a request whose rule names a secret that is not set, saying which', async () => {
    const before = seen.length;
    const res = await get(`https://missing.test:${httpsPort}/x`, proxy.caBundle);
    expect(res.status).toBe(403);
    expect(res.body).toContain('requests to missing.test need the secret "nope"');
    const plain = await get(`http://missing.test:${httpPort}/x`);
    expect(plain.status).toBe(403);
    expect(seen.length).toBe(before);
  });
});

/**
 * Opens a CONNECT tunnel to `host:port` through the proxy, speaks TLS in it trusting what a
 * sandbox trusts, writes `raw` as it is and returns everything the other side answers until it
 * closes (the requests ask for `connection: close`).
 */
async function rawThroughTunnel(host: string, port: number, raw: string): Promise<string> {
  const socket = netConnect({ host: '127.0.0.1', port: proxy.port });
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    let head = '';
    const onData = (d: Buffer) => {
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (head.startsWith('HTTP/1.1 200 ')) resolve();
      else reject(new Error(`CONNECT refused: ${head}`));
    };
    socket.on('data', onData);
    socket.write(`CONNECT ${host}:${port} HTTP/1.1\r\nhost: ${host}:${port}\r\n\r\n`);
  });
  const tls = tlsConnect({ socket, servername: host, ca: proxy.caBundle });
  return new Promise((resolve, reject) => {
    let text = '';
    tls.once('secureConnect', () => tls.write(raw));
    tls.on('data', (d: Buffer) => (text += d.toString('utf8')));
    tls.once('error', (err) => (text ? resolve(text) : reject(err)));
    tls.once('close', () => resolve(text));
  });
}

describe('egress proxy: a terminated tunnel serves only its own origin', () => {
  const authority = () => `api.test:${httpsPort}`;

  it('refuses an absolute-form target naming another host: not forwarded, no credential', async () => {
    const before = seen.length;
    const answer = await rawThroughTunnel(
      'api.test',
      httpsPort,
      `GET https://attacker.test/steal HTTP/1.1\r\nhost: ${authority()}\r\nconnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 421 /);
    expect(answer).toContain(
      `toolgate egress: this tunnel is for https://${authority()}; the request names https://attacker.test`,
    );
    expect(seen.length).toBe(before);
  });

  it('refuses every other authority a request can name, and forwards its own', async () => {
    const before = seen.length;
    const ask = (line: string, host = authority()) =>
      rawThroughTunnel(
        'api.test',
        httpsPort,
        `${line} HTTP/1.1\r\nhost: ${host}\r\nconnection: close\r\n\r\n`,
      );
    const refusals = {
      // Host names another server (front ends route by it).
      host: await ask('GET /x', 'attacker.test'),
      hostPort: await ask('GET /x', 'api.test:1'),
      // Same host, another scheme or port, or the host hidden behind userinfo.
      scheme: await ask(`GET http://${authority()}/x`),
      port: await ask(`GET https://api.test:${httpsPort2}/x`),
      userinfo: await ask(`GET https://${authority()}@attacker.test/x`),
      // The asterisk form is OPTIONS' only; a path must start with "/"; no tunnel in a tunnel.
      asterisk: await ask('GET *'),
      relative: await ask('GET x/y'),
      connect: await ask('CONNECT attacker.test:443'),
    };
    for (const [name, answer] of Object.entries(refusals)) {
      expect(answer, name).toMatch(/^HTTP\/1\.1 4\d\d /);
      expect(answer, name).toContain('toolgate egress: ');
    }
    expect(refusals.host).toMatch(/^HTTP\/1\.1 421 /);
    expect(refusals.userinfo).toMatch(/^HTTP\/1\.1 400 /);
    expect(seen.length).toBe(before);

    // What names this tunnel's origin goes on, in origin form, with the credential.
    const own = await ask(`GET https://${authority()}/abs?q=1`);
    expect(own).toMatch(/^HTTP\/1\.1 200 /);
    expect(seen.at(-1)).toMatchObject({ url: '/abs?q=1', host: authority() });
    expect(seen.at(-1)?.headers.authorization).toBe(`Bearer ${VALUE}`);
    const options = await ask('OPTIONS *', authority().toUpperCase());
    expect(options).toMatch(/^HTTP\/1\.1 200 /);
    expect(seen.at(-1)).toMatchObject({ url: '*', host: authority() });
    expect(seen.length).toBe(before + 2);
  });
});

describe('egress proxy: a rule binds its scheme and port', () => {
  it('a rule for one HTTPS origin gives nothing to plain http or another port of that host', async () => {
    // The rule's own origin: terminated, the header added.
    expect(await get(`https://tls-only.test:${httpsPort}/ruled`, proxy.caBundle)).toEqual({
      status: 200,
      body: 'hello from upstream',
    });
    expect(seen.at(-1)).toMatchObject({ url: '/ruled', tls: true });
    expect(seen.at(-1)?.headers.authorization).toBe(`Bearer ${VALUE}`);

    // The same host over plain http: reached, in clear, without the secret.
    expect((await get(`http://tls-only.test:${httpPort}/clear`)).status).toBe(200);
    expect(seen.at(-1)?.url).toBe('/clear');
    expect(seen.at(-1)?.headers.authorization).toBeUndefined();

    // The same host on another HTTPS port: an opaque tunnel, the real host's certificate.
    const other = await get(`https://tls-only.test:${httpsPort2}/other`, upstreamCa.certPem);
    expect(other.status).toBe(200);
    expect(seen.at(-1)?.url).toBe('/other');
    expect(seen.at(-1)?.headers.authorization).toBeUndefined();
  });
});
