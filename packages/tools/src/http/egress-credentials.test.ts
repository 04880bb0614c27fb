/**
 * Credential injection by the egress proxy (docs/credentials.md), on loopback without Docker:
 * plain http to a host with a rule gets the header; HTTPS to it is terminated with the proxy's
 * CA and forwarded to the real host, verified; HTTPS to any other host stays an opaque tunnel.
 * The sandbox side is undici's proxy client trusting what a sandbox trusts (`caBundle`).
 */
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { ToolError, type CallCredentials } from '@toolgate/registry';
import { ProxyAgent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EgressCa } from './egress-ca.js';
import { startEgressProxy, type EgressProxy } from './egress-proxy.js';

const VALUE = 'proxy-secret-value-4711';

/** The credentials a call's rules give: `api.test` gets Authorization, `missing.test` cannot. */
const credentials: CallCredentials = {
  covers: (host) => host === 'api.test' || host === 'missing.test' || host === 'wrong.test',
  headersFor: (host) =>
    host !== 'missing.test'
      ? Promise.resolve([['authorization', `Bearer ${VALUE}`]])
      : Promise.reject(
          new ToolError('credential_missing', 'requests to missing.test need the secret "nope"'),
        ),
};

let upstreamCa: EgressCa;
let httpsServer: Server;
let httpServer: Server;
let httpsPort: number;
let httpPort: number;
let proxy: EgressProxy;
const seen: { host: string | undefined; headers: IncomingHttpHeaders; tls: boolean }[] = [];

beforeAll(async () => {
  // The real hosts: a plain http server, and an https one with a certificate from a CA of its
  // own (neither the proxy's nor a public one), which the proxy is told to trust.
  upstreamCa = new EgressCa('test upstream CA');
  const record =
    (tls: boolean) =>
    (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
      seen.push({ host: req.headers.host, headers: req.headers, tls });
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
  httpServer = createHttpServer(record(false));
  httpsPort = await listen(httpsServer);
  httpPort = await listen(httpServer);
  proxy = await startEgressProxy({
    host: '127.0.0.1',
    policy: {
      allowPrivateNetworks: false,
      allowHosts: ['api.test', 'plain.test', 'missing.test', 'wrong.test'],
    },
    lookup: () => Promise.resolve([{ address: '127.0.0.1', family: 4 }]),
    credentialsOf: (address) => (address === '127.0.0.1' ? credentials : undefined),
    upstreamCa: [upstreamCa.certPem],
  });
});

afterAll(async () => {
  await proxy?.close();
  httpsServer?.close();
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
