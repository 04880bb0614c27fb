/**
 * The egress proxy's connection budget: each client (told apart by the source address of its
 * sandbox) gets a share of the worker's connections, and a sandbox that is gone gives its back.
 * Real sockets on loopback; 127.0.0.2 and 127.0.0.3 stand in for two sandboxes' addresses.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSandboxConfig } from '@toolgate/sandbox';
import { startEgressProxy, type EgressProxy } from './egress-proxy.js';

const SOURCES: Record<string, string> = { '127.0.0.2': 'alice', '127.0.0.3': 'bob' };

/** A TCP server standing in for a destination; keeps its sockets open. */
async function startTarget(): Promise<{ server: Server; port: number; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => undefined);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, sockets };
}

/**
 * One CONNECT tunnel from `source`; resolves with the answer's status line and, when the proxy
 * refused (it closes the socket after its answer), the answer's text.
 */
function openTunnel(
  proxy: EgressProxy,
  targetPort: number,
  source: string,
  open: Socket[],
): Promise<{ status: string; text: string; socket: Socket }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: proxy.port, localAddress: source });
    open.push(socket);
    let head = '';
    socket.on('error', reject);
    socket.on('data', (d) => {
      head += d.toString();
      const status = head.split('\r\n')[0]!;
      if (!head.includes('\r\n')) return;
      if (status.includes(' 200 ')) {
        resolve({ status, text: head, socket: socket.removeAllListeners('data') });
      }
    });
    socket.on('end', () => resolve({ status: head.split('\r\n')[0]!, text: head, socket }));
    socket.write(`CONNECT 127.0.0.1:${targetPort} HTTP/1.1\r\nhost: x\r\n\r\n`);
  });
}

describe('egress proxy: per-client share of connections', () => {
  let target: { server: Server; port: number; sockets: Set<Socket> };
  let proxy: EgressProxy;
  const open: Socket[] = [];

  beforeAll(async () => {
    target = await startTarget();
    proxy = await startEgressProxy({
      host: '127.0.0.1',
      policy: { allowPrivateNetworks: false, allowHosts: [`127.0.0.1:${target.port}`] },
      maxConnections: 4,
      maxConnectionsPerClient: 2,
      identify: (address) => SOURCES[address],
    });
  });
  afterAll(async () => {
    for (const s of open) s.destroy();
    await proxy?.close();
    target?.server.close();
  });

  const tunnel = (source: string) => openTunnel(proxy, target.port, source, open);

  it('a client at its share is refused while another still gets its own', async () => {
    const a = [];
    for (let i = 0; i < 4; i++) a.push((await tunnel('127.0.0.2')).status);
    expect(a).toEqual([
      'HTTP/1.1 200 Connection Established',
      'HTTP/1.1 200 Connection Established',
      'HTTP/1.1 503 Service Unavailable',
      'HTTP/1.1 503 Service Unavailable',
    ]);
    expect((await tunnel('127.0.0.3')).status).toBe('HTTP/1.1 200 Connection Established');
    expect((await tunnel('127.0.0.3')).status).toBe('HTTP/1.1 200 Connection Established');
    // An address no sandbox holds is not served at all.
    expect((await tunnel('127.0.0.4')).status).toBe('HTTP/1.1 403 Forbidden');
  });

  it("a gone sandbox's connections are closed and its share is free again", async () => {
    proxy.disconnect('127.0.0.2');
    await expect
      .poll(async () => (await tunnel('127.0.0.2')).status, { timeout: 5_000 })
      .toBe('HTTP/1.1 200 Connection Established');
  });
});

describe('egress proxy: the share set by sandbox.egress', () => {
  it('is 64 of 256 by default, never more than the total, and applies as configured', async () => {
    expect(parseSandboxConfig().egress).toEqual({
      maxConnections: 256,
      maxConnectionsPerClient: 64,
    });
    expect(() => parseSandboxConfig({ egress: { maxConnectionsPerClient: 300 } })).toThrow(
      'invalid sandbox config at /egress/maxConnectionsPerClient: must be at most egress.maxConnections (256), got 300',
    );

    // The fields the worker passes to the proxy, from a config that sets a share of 3 in 8.
    const { egress } = parseSandboxConfig({
      egress: { maxConnections: 8, maxConnectionsPerClient: 3 },
    });
    const target = await startTarget();
    const proxy = await startEgressProxy({
      host: '127.0.0.1',
      policy: { allowPrivateNetworks: false, allowHosts: [`127.0.0.1:${target.port}`] },
      maxConnections: egress.maxConnections,
      maxConnectionsPerClient: egress.maxConnectionsPerClient,
      identify: (address) => SOURCES[address],
    });
    const open: Socket[] = [];
    try {
      const alice = [];
      for (let i = 0; i < 3; i++)
        alice.push((await openTunnel(proxy, target.port, '127.0.0.2', open)).status);
      expect(alice).toEqual(Array(3).fill('HTTP/1.1 200 Connection Established'));
      const refused = await openTunnel(proxy, target.port, '127.0.0.2', open);
      expect(refused.status).toBe('HTTP/1.1 503 Service Unavailable');
      expect(refused.text).toContain(
        'toolgate egress: too many connections: this client holds its share (3)',
      );
      // Another client still gets its own share of 3.
      for (let i = 0; i < 3; i++) {
        expect((await openTunnel(proxy, target.port, '127.0.0.3', open)).status).toBe(
          'HTTP/1.1 200 Connection Established',
        );
      }
    } finally {
      for (const s of open) s.destroy();
      await proxy.close();
      target.server.close();
    }
  });
});
