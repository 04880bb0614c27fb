/**
 * Network-enabled sandboxes (sandbox.allowNetwork, manifest tools with `network: true`): they
 * reach what the http tools' SSRF guard allows, through the egress proxy, and nothing else —
 * not the host's services, not private or metadata addresses, not around the proxy.
 */
import { createServer, type Server } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createSandbox, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { startEgressProxy } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`egress: skipped, ${reason}`);

async function serve(host: string, body: string): Promise<{ server: Server; port: number }> {
  const server = createServer((_req, res) => res.end(body));
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { server, port: (server.address() as { port: number }).port };
}

describe.skipIf(reason !== undefined)('network-enabled sandboxes (docker)', () => {
  let dir: string;
  let sandbox: Sandbox;
  let unfiltered: Sandbox;
  let secret: { server: Server; port: number };
  let allowed: { server: Server; port: number };

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'toolgate-egress-'));
    // A host service on every interface (as Redis or the Docker API might be), and one the
    // operator opened to tools with policy.http.allowHosts.
    secret = await serve('0.0.0.0', 'host secret');
    allowed = await serve('127.0.0.1', 'allowed service');
    sandbox = await createSandbox(
      testSandboxConfig('docker', path.join(dir, 'a'), { allowNetwork: true, pool: { size: 0 } }),
      {
        startEgressProxy: (host) =>
          startEgressProxy({
            host,
            policy: { allowPrivateNetworks: false, allowHosts: [`127.0.0.1:${allowed.port}`] },
          }),
      },
    );
    await sandbox.start();
    unfiltered = await createSandbox(
      testSandboxConfig('docker', path.join(dir, 'b'), { allowNetwork: true, pool: { size: 0 } }),
    );
  }, 60_000);

  afterAll(async () => {
    await sandbox?.close();
    await unfiltered?.close();
    secret?.server.close();
    allowed?.server.close();
    await rm(dir, { recursive: true, force: true });
  });

  const sh = async (script: string) => {
    const r = await sandbox.run({
      image: 'shell',
      argv: ['bash', '-c', script],
      network: true,
      timeoutMs: 20_000,
    });
    return r.stdout + r.stderr;
  };
  // The bridge address the sandbox sees the host at (the proxy's address).
  const gateway = 'P=${HTTPS_PROXY#http://}; GW=${P%:*};';

  it('reaches a destination the SSRF policy allows, through the proxy', async () => {
    expect(await sh(`curl -sS -m 10 http://127.0.0.1:${allowed.port}/`)).toBe('allowed service');
  });

  it('the proxy refuses private, loopback and metadata destinations with the reason', async () => {
    const out = await sh(
      `${gateway} curl -sS -m 10 http://$GW:${secret.port}/; echo; ` +
        `curl -sS -m 10 http://127.0.0.1:${secret.port}/; echo; ` +
        `curl -sS -m 10 http://169.254.169.254/latest/meta-data/; echo; ` +
        `curl -sS -m 10 https://127.0.0.1:${secret.port}/ 2>&1; echo`,
    );
    expect(out).not.toContain('host secret');
    expect(out).toMatch(/toolgate egress: refused: .*private/);
    expect(out).toMatch(/toolgate egress: refused: .*loopback/);
    expect(out).toMatch(/toolgate egress: refused: .*cloudMetadata|metadata/);
    expect(out).toMatch(/CONNECT tunnel failed, response 403/);
  });

  it('nothing goes around the proxy: host services on the bridge and outside addresses are unreachable', async () => {
    const out = await sh(
      `${gateway} for u in http://$GW:${secret.port}/ http://172.17.0.1:${secret.port}/ http://169.254.169.254/ http://1.1.1.1/; do ` +
        `curl -sS -m 3 --noproxy '*' "$u" >/dev/null 2>&1 && echo "REACHED $u" || echo "blocked $u"; done`,
    );
    expect(out).not.toContain('REACHED');
    expect(out.match(/blocked/g)).toHaveLength(4);
  }, 30_000);

  it('without an egress filter, network calls are refused rather than given an open network', async () => {
    await expect(
      unfiltered.run({ image: 'shell', argv: ['true'], network: true }),
    ).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringContaining('no egress filter'),
    });
  });

  it('closing the driver removes its network and firewall rules', async () => {
    const { execFileSync } = await import('node:child_process');
    const before = execFileSync('docker', ['network', 'ls', '--format', '{{.Name}}'], {
      encoding: 'utf8',
    });
    expect(before).toMatch(/toolgate-egress-/);
    await sandbox.close();
    const after = execFileSync('docker', ['network', 'ls', '--format', '{{.Name}}'], {
      encoding: 'utf8',
    });
    const rules = execFileSync('iptables', ['-S', 'INPUT'], { encoding: 'utf8' });
    const mine = before
      .split('\n')
      .filter((n) => n.startsWith('toolgate-egress-') && !after.includes(n));
    expect(mine.length).toBeGreaterThan(0);
    for (const n of mine) expect(rules).not.toContain(`tge-${n.slice('toolgate-egress-'.length)}`);
  });
});
