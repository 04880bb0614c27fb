/**
 * The http tools against real HTTP servers on loopback. `target` (and `target6` on ::1) must
 * stay unreachable in every blocked case: each test checks that they saw no request. Name
 * resolution is an injected table, so no test ever asks a real resolver about anything but
 * what the guard answers itself (localhost).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { createSecureContext } from 'node:tls';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ToolError, ToolRegistry, type ToolContext, type ToolServices } from '@toolgate/registry';
import {
  createHttpServices,
  httpTools,
  type HttpPolicy,
  type HttpResult,
  type LookupFunction,
} from './index.js';
import { httpGet, httpPost } from './http-tools.js';

interface TestServer {
  server: Server;
  port: number;
  hits: IncomingMessage[];
}

async function listen(
  host: string,
  handler: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end('secret'),
): Promise<TestServer> {
  const hits: IncomingMessage[] = [];
  const server = createHttpServer((req, res) => {
    hits.push(req);
    handler(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  return { server, port: (server.address() as AddressInfo).port, hits };
}

async function close(s: TestServer | undefined): Promise<void> {
  if (!s) return;
  s.server.closeAllConnections();
  await new Promise<void>((resolve) => s.server.close(() => resolve()));
}

async function readBody(req: IncomingMessage): Promise<string> {
  let body = '';
  for await (const chunk of req) body += String(chunk);
  return body;
}

let target: TestServer; // must never be reached
let target6: TestServer | undefined; // same, on ::1 where the machine has IPv6 loopback
let allowed: TestServer; // allow-listed by 127.0.0.1:<port>
let other: TestServer; // a second allow-listed origin

const PUBLIC = '93.184.216.34';
const lookups: string[] = [];
/** The injected resolver: a fixed table, never the network. */
const table: Record<string, string[]> = {
  'evil.test': ['127.0.0.1'],
  'evil6.test': ['::1'],
  'mapped.test': ['::ffff:127.0.0.1'],
  'private.test': ['10.0.0.7'],
  'rebind.test': [PUBLIC, '127.0.0.1'],
  'public.test': [PUBLIC],
  'metadata.test': ['169.254.169.254'],
};
const lookup: LookupFunction = async (hostname) => {
  lookups.push(hostname);
  const answers = table[hostname];
  if (!answers)
    throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
  return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

function policy(overrides: Partial<HttpPolicy> = {}): HttpPolicy {
  return {
    allowPrivateNetworks: false,
    allowHosts: [`127.0.0.1:${allowed.port}`, `127.0.0.1:${other.port}`],
    maxResponseBytes: 1_048_576,
    timeoutMs: 5000,
    maxRedirects: 5,
    ...overrides,
  };
}

function ctx(p: HttpPolicy = policy(), signal = new AbortController().signal): ToolContext {
  return {
    callId: 'call-1',
    clientId: 'client-1',
    signal,
    services: { http: createHttpServices(p, { lookup }) } as unknown as ToolServices,
  };
}

async function get(
  url: string,
  p?: HttpPolicy,
  headers?: Record<string, string>,
): Promise<HttpResult> {
  return await httpGet.handler(headers ? { url, headers } : { url }, ctx(p));
}

/** The ToolError a call fails with (fails the test if it succeeds or throws something else). */
async function failure(promise: Promise<unknown>): Promise<ToolError> {
  const err = await promise.then(
    (value) => {
      throw new Error(`expected a ToolError, got ${JSON.stringify(value).slice(0, 200)}`);
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ToolError);
  return err as ToolError;
}

beforeAll(async () => {
  target = await listen('127.0.0.1');
  target6 = await listen('::1').catch(() => undefined);
  allowed = await listen('127.0.0.1', (req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    switch (u.pathname) {
      case '/hello':
        res.setHeader('content-type', 'text/plain; charset=utf-8');
        res.setHeader('set-cookie', 'session=abc');
        res.setHeader('x-internal-token', 'hidden');
        res.setHeader('x-ratelimit-remaining', '41');
        res.end('hello from the allowed server');
        return;
      case '/echo':
        void readBody(req).then((body) => {
          res.setHeader('content-type', 'application/json');
          res.end(JSON.stringify({ method: req.method, headers: req.headers, body }));
        });
        return;
      case '/redirect':
        res.statusCode = Number(u.searchParams.get('status') ?? 302);
        res.setHeader('location', u.searchParams.get('to') ?? '/hello');
        res.end();
        return;
      case '/loop':
        res.statusCode = 302;
        res.setHeader('location', '/loop');
        res.end();
        return;
      case '/big': {
        res.setHeader('content-type', 'text/plain');
        const chunk = 'x'.repeat(1000);
        let sent = 0;
        const pump = () => {
          while (sent < 5000) {
            sent++;
            if (!res.write(chunk)) return void res.once('drain', pump);
          }
          res.end();
        };
        res.on('close', () => (sent = 5000));
        pump();
        return;
      }
      case '/utf8-cut':
        res.setHeader('content-type', 'text/plain; charset=utf-8');
        res.end('ab€€€'); // € is 3 bytes: a 4-byte cap ends inside the first one
        return;
      case '/binary':
        res.setHeader('content-type', 'image/png');
        res.end(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff]));
        return;
      case '/latin1':
        res.setHeader('content-type', 'text/plain; charset=iso-8859-1');
        res.end(Buffer.from([0x63, 0x61, 0x66, 0xe9])); // "café"
        return;
      case '/status':
        res.statusCode = 404;
        res.end('not here');
        return;
      case '/slow-headers':
        return; // never answers
      case '/slow-body':
        res.setHeader('content-type', 'text/plain');
        res.write('partial');
        return; // never ends
      default:
        res.statusCode = 500;
        res.end();
    }
  });
  other = await listen('127.0.0.1', (req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ origin: 'other', headers: req.headers }));
  });
});

afterAll(async () => {
  await Promise.all([close(target), close(target6), close(allowed), close(other)]);
});

afterEach(() => {
  // The whole point: nothing ever reached the servers that are not allowed.
  expect(target.hits).toHaveLength(0);
  expect(target6?.hits ?? []).toHaveLength(0);
  lookups.length = 0;
});

describe('blocked destinations', () => {
  it.each([
    ['plain loopback', () => `http://127.0.0.1:${target.port}/`, '127.0.0.1', 'loopback'],
    ['another loopback address', () => `http://127.0.0.2:${target.port}/`, '127.0.0.2', 'loopback'],
    ['decimal', () => `http://2130706433:${target.port}/`, '127.0.0.1', 'loopback'],
    ['hex', () => `http://0x7f000001:${target.port}/`, '127.0.0.1', 'loopback'],
    ['octal', () => `http://0177.0.0.1:${target.port}/`, '127.0.0.1', 'loopback'],
    ['short', () => `http://127.1:${target.port}/`, '127.0.0.1', 'loopback'],
    ['mixed hex/dotted', () => `http://0x7f.0.0.1:${target.port}/`, '127.0.0.1', 'loopback'],
    ['unspecified 0.0.0.0', () => `http://0.0.0.0:${target.port}/`, '0.0.0.0', 'unspecified'],
    ['IPv6 loopback', () => `http://[::1]:${target6?.port ?? target.port}/`, '::1', 'loopback'],
    ['IPv6 unspecified', () => `http://[::]:${target.port}/`, '::', 'unspecified'],
    [
      'IPv4-mapped dotted',
      () => `http://[::ffff:127.0.0.1]:${target.port}/`,
      '::ffff:7f00:1',
      'loopback',
    ],
    [
      'IPv4-mapped hex',
      () => `http://[::ffff:7f00:1]:${target.port}/`,
      '::ffff:7f00:1',
      'loopback',
    ],
    [
      'NAT64 of loopback',
      () => `http://[64:ff9b::7f00:1]:${target.port}/`,
      '64:ff9b::7f00:1',
      'loopback',
    ],
    [
      'cloud metadata',
      () => 'http://169.254.169.254/latest/meta-data/',
      '169.254.169.254',
      'cloudMetadata',
    ],
    ['private 10/8', () => 'http://10.0.0.1/', '10.0.0.1', 'private'],
    ['private 192.168/16', () => 'http://192.168.0.1/', '192.168.0.1', 'private'],
    ['carrier-grade NAT', () => 'http://100.64.0.1/', '100.64.0.1', 'carrierGradeNat'],
    ['link-local', () => 'http://169.254.10.10/', '169.254.10.10', 'linkLocal'],
    ['unique-local IPv6', () => 'http://[fd00::1]/', 'fd00::1', 'uniqueLocal'],
    ['AWS metadata over IPv6', () => 'http://[fd00:ec2::254]/', 'fd00:ec2::254', 'cloudMetadata'],
    ['broadcast', () => 'http://255.255.255.255/', '255.255.255.255', 'broadcast'],
    ['multicast', () => 'http://224.0.0.1/', '224.0.0.1', 'multicast'],
  ])('%s', async (_name, url, address, range) => {
    const err = await failure(get(url()));
    expect(err.code).toBe('blocked_address');
    expect(err.details).toMatchObject({ address, range });
    expect(lookups).toEqual([]); // literal addresses never reach the resolver
  });

  it('localhost and *.localhost, without asking DNS', async () => {
    for (const host of ['localhost', 'LOCALHOST.', 'api.localhost']) {
      const err = await failure(get(`http://${host}:${target.port}/`));
      expect(err.code).toBe('blocked_address');
      expect(err.details).toMatchObject({ range: 'loopback' });
    }
    expect(lookups).toEqual([]);
  });

  it('a name that resolves to loopback', async () => {
    const err = await failure(get(`http://evil.test:${target.port}/`));
    expect(err).toMatchObject({
      code: 'blocked_address',
      details: { host: 'evil.test', address: '127.0.0.1', range: 'loopback' },
    });
    expect(err.message).toMatch(/evil\.test.*127\.0\.0\.1.*loopback/);
    for (const [host, range] of [
      ['evil6.test', 'loopback'],
      ['mapped.test', 'loopback'],
      ['private.test', 'private'],
      ['metadata.test', 'cloudMetadata'],
    ]) {
      expect((await failure(get(`http://${host}:${target.port}/`))).details).toMatchObject({
        range,
      });
    }
  });

  it('DNS rebinding: a public address first and loopback second is refused (every address is checked)', async () => {
    const err = await failure(get(`http://rebind.test:${target.port}/`));
    expect(err.code).toBe('blocked_address');
    expect(err.details).toMatchObject({ address: '127.0.0.1', range: 'loopback' });
  });

  it('cloud metadata names, before any lookup, even with allowPrivateNetworks', async () => {
    for (const host of ['metadata.google.internal', 'METADATA.google.internal.', 'metadata.goog']) {
      const err = await failure(
        get(`http://${host}/computeMetadata/v1/`, policy({ allowPrivateNetworks: true })),
      );
      expect(err.code).toBe('blocked_address');
      expect(err.details).toMatchObject({ range: 'cloudMetadata' });
    }
    const err = await failure(
      get('http://169.254.169.254/', policy({ allowPrivateNetworks: true })),
    );
    expect(err.details).toMatchObject({ range: 'cloudMetadata' });
    expect(lookups).toEqual([]);
  });

  it('a redirect from an allowed server to loopback is checked again and refused', async () => {
    const to = `http://127.0.0.1:${target.port}/admin`;
    const err = await failure(
      get(`http://127.0.0.1:${allowed.port}/redirect?to=${encodeURIComponent(to)}`),
    );
    expect(err).toMatchObject({
      code: 'blocked_address',
      details: { address: '127.0.0.1', port: target.port },
    });
    expect(allowed.hits.at(-1)?.url).toMatch(/^\/redirect/);
  });

  it('a redirect to a name that resolves to loopback, and to the metadata service', async () => {
    for (const to of [
      `http://evil.test:${target.port}/`,
      'http://169.254.169.254/latest/',
      `http://[::1]:${target.port}/`,
    ]) {
      const err = await failure(
        get(`http://127.0.0.1:${allowed.port}/redirect?status=307&to=${encodeURIComponent(to)}`),
      );
      expect(err.code).toBe('blocked_address');
    }
  });

  it.each([
    'file:///etc/passwd',
    'ftp://127.0.0.1/',
    'gopher://127.0.0.1:70/_x',
    'data:text/plain,hi',
    'javascript:alert(1)',
    'ws://example.test/',
  ])('non-http scheme %s', async (url) => {
    const err = await failure(get(url));
    expect(err.code).toBe('invalid_url');
    expect(err.message).toMatch(/only http and https/);
  });

  it('a redirect to a non-http scheme', async () => {
    const err = await failure(
      get(
        `http://127.0.0.1:${allowed.port}/redirect?to=${encodeURIComponent('file:///etc/passwd')}`,
      ),
    );
    expect(err.code).toBe('invalid_url');
  });

  it('malformed URLs and URLs with credentials', async () => {
    expect((await failure(get('not a url'))).code).toBe('invalid_url');
    expect((await failure(get('/relative'))).code).toBe('invalid_url');
    expect((await failure(get(`http://user:pw@127.0.0.1:${allowed.port}/hello`))).code).toBe(
      'invalid_url',
    );
  });

  it('an unknown name is a network error, not a crash', async () => {
    const err = await failure(get('http://nowhere.test/'));
    expect(err).toMatchObject({
      code: 'http_error',
      details: { reason: 'dns', code: 'ENOTFOUND' },
    });
  });
});

describe('allowed destinations', () => {
  it('GET an allow-listed loopback server: status, safe headers, text body, final URL', async () => {
    const result = await get(`http://127.0.0.1:${allowed.port}/hello`);
    expect(result).toMatchObject({
      status: 200,
      statusText: 'OK',
      url: `http://127.0.0.1:${allowed.port}/hello`,
      body: 'hello from the allowed server',
      encoding: 'utf-8',
      truncated: false,
      bytes: 29,
      redirects: 0,
    });
    expect(result.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(result.headers['x-ratelimit-remaining']).toBe('41');
    expect(result.headers['set-cookie']).toBeUndefined();
    expect(result.headers['x-internal-token']).toBeUndefined();
  });

  it('POST: body, content type and headers arrive; hop-by-hop and host headers do not', async () => {
    const result = await httpPost.handler(
      {
        url: `http://127.0.0.1:${allowed.port}/echo`,
        body: '{"q":"toolgate"}',
        headers: {
          Host: 'internal.admin',
          Connection: 'close, X-Drop-Me',
          'X-Drop-Me': '1',
          'Transfer-Encoding': 'chunked',
          'Proxy-Authorization': 'Basic Zm9v',
          'X-Custom': 'yes',
          Authorization: 'Bearer token-for-this-api',
        },
      },
      ctx(),
    );
    expect(result.status).toBe(200);
    const echoed = JSON.parse(result.body) as {
      method: string;
      body: string;
      headers: Record<string, string>;
    };
    expect(echoed.method).toBe('POST');
    expect(echoed.body).toBe('{"q":"toolgate"}');
    expect(echoed.headers).toMatchObject({
      host: `127.0.0.1:${allowed.port}`,
      'content-type': 'application/json',
      'x-custom': 'yes',
      authorization: 'Bearer token-for-this-api',
      'accept-encoding': 'identity',
      'user-agent': expect.stringMatching(/^toolgate-http\//),
    });
    for (const h of ['x-drop-me', 'proxy-authorization', 'transfer-encoding'])
      expect(echoed.headers[h]).toBeUndefined();
  });

  it('a plain-text POST body gets text/plain', async () => {
    const result = await httpPost.handler(
      { url: `http://127.0.0.1:${allowed.port}/echo`, body: 'hi' },
      ctx(),
    );
    expect(JSON.parse(result.body).headers['content-type']).toBe('text/plain; charset=utf-8');
  });

  it('a non-2xx status is a result, not an error', async () => {
    expect(await get(`http://127.0.0.1:${allowed.port}/status`)).toMatchObject({
      status: 404,
      body: 'not here',
    });
  });

  it('a name opened in allowHosts connects to the address checked, with one lookup and the original Host', async () => {
    const p = policy({ allowHosts: ['evil.test'] });
    const result = await httpPost.handler(
      { url: `http://evil.test:${other.port}/`, body: 'x' },
      ctx(p),
    );
    expect(JSON.parse(result.body)).toMatchObject({
      origin: 'other',
      headers: { host: `evil.test:${other.port}` },
    });
    expect(lookups).toEqual(['evil.test']);
  });

  it('allowPrivateNetworks opens loopback', async () => {
    const result = await get(
      `http://localhost:${allowed.port}/hello`,
      policy({ allowHosts: [], allowPrivateNetworks: true }),
    );
    expect(result.body).toBe('hello from the allowed server');
  });

  it('an allow-listed IPv6 loopback server is reachable by literal address', async (t) => {
    const v6 = await listen('::1', (_req, res) => res.end('v6')).catch(() => undefined);
    if (!v6) return t.skip();
    try {
      const result = await get(
        `http://[::1]:${v6.port}/`,
        policy({ allowHosts: [`[::1]:${v6.port}`] }),
      );
      expect(result).toMatchObject({ status: 200, body: 'v6', url: `http://[::1]:${v6.port}/` });
    } finally {
      await close(v6);
    }
  });

  it('a CIDR entry opens a range for any port', async () => {
    const result = await get(
      `http://127.0.0.1:${allowed.port}/hello`,
      policy({ allowHosts: ['127.0.0.0/30'] }),
    );
    expect(result.status).toBe(200);
  });

  it('an allowHosts port only opens that port', async () => {
    const err = await failure(
      get(
        `http://127.0.0.1:${target.port}/`,
        policy({ allowHosts: [`127.0.0.1:${allowed.port}`] }),
      ),
    );
    expect(err.code).toBe('blocked_address');
  });

  it('follows redirects, each checked, and reports the final URL', async () => {
    const result = await get(
      `http://127.0.0.1:${allowed.port}/redirect?to=/redirect%3Fto%3D/hello`,
    );
    expect(result).toMatchObject({
      status: 200,
      redirects: 2,
      url: `http://127.0.0.1:${allowed.port}/hello`,
    });
  });

  it('303 after POST continues as GET without a body; 307 keeps POST and body', async () => {
    const base = `http://127.0.0.1:${allowed.port}`;
    const seeOther = await httpPost.handler(
      { url: `${base}/redirect?status=303&to=/echo`, body: 'data' },
      ctx(),
    );
    expect(JSON.parse(seeOther.body)).toMatchObject({ method: 'GET', body: '' });
    const temporary = await httpPost.handler(
      { url: `${base}/redirect?status=307&to=/echo`, body: 'data' },
      ctx(),
    );
    expect(JSON.parse(temporary.body)).toMatchObject({ method: 'POST', body: 'data' });
  });

  it('Authorization and Cookie are not carried to another origin on a redirect', async () => {
    const to = `http://127.0.0.1:${other.port}/`;
    const result = await get(
      `http://127.0.0.1:${allowed.port}/redirect?to=${encodeURIComponent(to)}`,
      undefined,
      {
        Authorization: 'Bearer secret',
        Cookie: 'a=b',
        'X-Kept': '1',
      },
    );
    const seen = JSON.parse(result.body) as { headers: Record<string, string> };
    expect(seen.headers.authorization).toBeUndefined();
    expect(seen.headers.cookie).toBeUndefined();
    expect(seen.headers['x-kept']).toBe('1');
  });

  it('too many redirects', async () => {
    const err = await failure(
      get(`http://127.0.0.1:${allowed.port}/loop`, policy({ maxRedirects: 3 })),
    );
    expect(err).toMatchObject({
      code: 'too_many_redirects',
      details: { redirects: 3, location: '/loop' },
    });
    expect(
      (await failure(get(`http://127.0.0.1:${allowed.port}/loop`, policy({ maxRedirects: 0 }))))
        .code,
    ).toBe('too_many_redirects');
  });
});

describe('limits', () => {
  it('caps the response size: streams, stops and says truncated', async () => {
    const started = allowed.hits.length;
    const result = await get(
      `http://127.0.0.1:${allowed.port}/big`,
      policy({ maxResponseBytes: 1500 }),
    );
    expect(result).toMatchObject({ status: 200, truncated: true, bytes: 1500 });
    expect(result.body).toBe('x'.repeat(1500));
    expect(allowed.hits.length).toBe(started + 1);
  });

  it('a body exactly at the cap is not truncated', async () => {
    const result = await get(
      `http://127.0.0.1:${allowed.port}/hello`,
      policy({ maxResponseBytes: 29 }),
    );
    expect(result).toMatchObject({ truncated: false, bytes: 29 });
  });

  it('does not cut a character in half at the cap', async () => {
    const result = await get(
      `http://127.0.0.1:${allowed.port}/utf8-cut`,
      policy({ maxResponseBytes: 4 }),
    );
    expect(result).toMatchObject({ body: 'ab', encoding: 'utf-8', truncated: true, bytes: 4 });
  });

  it('binary bodies come back as base64; declared charsets are honoured', async () => {
    const png = await get(`http://127.0.0.1:${allowed.port}/binary`);
    expect(png).toMatchObject({ encoding: 'base64', body: 'iVBORw0KGgoA/w==' });
    expect((await get(`http://127.0.0.1:${allowed.port}/latin1`)).body).toBe('café');
  });

  it('caps the time when the server never answers', async () => {
    const started = performance.now();
    const err = await failure(
      get(`http://127.0.0.1:${allowed.port}/slow-headers`, policy({ timeoutMs: 300 })),
    );
    expect(err.code).toBe('timeout');
    expect(err.message).toMatch(/300 ms/);
    expect(performance.now() - started).toBeLessThan(3000);
  });

  it('caps the time when the body never ends', async () => {
    const err = await failure(
      get(`http://127.0.0.1:${allowed.port}/slow-body`, policy({ timeoutMs: 300 })),
    );
    expect(err.code).toBe('timeout');
  });

  it('stops when the call is aborted (ctx.signal)', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('worker timeout')), 100);
    const err = await failure(
      Promise.resolve(
        httpGet.handler(
          { url: `http://127.0.0.1:${allowed.port}/slow-headers` },
          ctx(policy(), controller.signal),
        ),
      ),
    );
    expect(err.code).toBe('cancelled');
  });

  it('a refused connection is an http_error', async () => {
    const closed = await listen('127.0.0.1');
    const port = closed.port;
    await close(closed);
    const err = await failure(
      get(`http://127.0.0.1:${port}/`, policy({ allowHosts: [`127.0.0.1:${port}`] })),
    );
    expect(err).toMatchObject({ code: 'http_error', details: { code: 'ECONNREFUSED' } });
  });

  it('header values with line breaks are refused', async () => {
    const err = await failure(
      get(`http://127.0.0.1:${allowed.port}/hello`, undefined, { 'X-A': 'a\r\nHost: evil' }),
    );
    expect(err.code).toBe('invalid_headers');
  });
});

const hasOpenssl = (() => {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe.skipIf(!hasOpenssl)('https', () => {
  it('keeps the original host name for SNI and verifies the certificate', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'toolgate-http-'));
    try {
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=evil.test',
          '-addext',
          'subjectAltName=DNS:evil.test',
          '-keyout',
          path.join(dir, 'key.pem'),
          '-out',
          path.join(dir, 'cert.pem'),
        ],
        { stdio: 'ignore' },
      );
      const credentials = {
        key: readFileSync(path.join(dir, 'key.pem')),
        cert: readFileSync(path.join(dir, 'cert.pem')),
      };
      const sni: string[] = [];
      const server = createHttpsServer(
        {
          ...credentials,
          SNICallback: (servername, cb) => {
            sni.push(servername);
            cb(null, createSecureContext(credentials));
          },
        },
        (_req, res) => res.end('tls'),
      );
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
      const port = (server.address() as AddressInfo).port;
      try {
        // Self-signed: the client must refuse it (verification on), after sending SNI evil.test.
        const err = await failure(
          get(`https://evil.test:${port}/`, policy({ allowHosts: ['evil.test'] })),
        );
        expect(err.code).toBe('http_error');
        expect(err.message).toMatch(/certificate/i);
        expect(sni).toEqual(['evil.test']);
      } finally {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('tool definitions', () => {
  it('register with the documented contract and validate headers by schema', () => {
    const registry = new ToolRegistry();
    registry.registerAll(httpTools);
    expect(registry.get('http_get')).toMatchObject({
      risk: 'safe',
      cacheTtlSeconds: 300,
      idempotent: true,
    });
    expect(registry.get('http_post')).toMatchObject({
      risk: 'sensitive',
      cacheTtlSeconds: 0,
      idempotent: false,
    });
    expect(
      registry.validate('http_get', {
        url: 'https://example.com',
        headers: { Accept: 'text/html' },
      }).ok,
    ).toBe(true);
    expect(
      registry.validate('http_get', { url: 'https://example.com', headers: { 'bad name': 'x' } })
        .ok,
    ).toBe(false);
    expect(
      registry.validate('http_get', { url: 'https://example.com', headers: { A: 1 } }).ok,
    ).toBe(false);
    expect(registry.validate('http_post', { url: 'https://example.com' }).ok).toBe(false);
  });

  it('a worker without http services gives a readable error', async () => {
    const bare: ToolContext = {
      callId: 'c',
      clientId: 'x',
      signal: new AbortController().signal,
      services: {} as ToolServices,
    };
    const err = await failure(
      Promise.resolve().then(() => httpGet.handler({ url: 'https://example.com' }, bare)),
    );
    expect(err.code).toBe('tool_unavailable');
  });
});
