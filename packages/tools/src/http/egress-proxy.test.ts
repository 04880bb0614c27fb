/**
 * The egress proxy's connection budget: each client (told apart by the source address of its
 * sandbox) gets a share of the worker's connections, and a sandbox that is gone gives its back.
 * Real sockets on loopback; 127.0.0.2 and 127.0.0.3 stand in for two sandboxes' addresses.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEgressProxy, type EgressProxy } from './egress-proxy.js';

const SOURCES: Record<string, string> = { '127.0.0.2': 'alice', '127.0.0.3': 'bob' };

describe('egress proxy: per-client share of connections', () => {
  let target: { server: Server; port: number; sockets: Set<Socket> };
  let proxy: EgressProxy;
  const open: Socket[] = [];

  beforeAll(async () => {
    const sockets = new Set<Socket>();
    const server = createServer((s) => {
      sockets.add(s);
      s.on('error', () => undefined);
      s.once('close', () => sockets.delete(s));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    target = { server, port: (server.address() as { port: number }).port, sockets };
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

  /** One CONNECT tunnel from `source`; resolves with the answer's status line. */
  const tunnel = (source: string) =>
    new Promise<{ status: string; socket: Socket }>((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port: proxy.port, localAddress: source });
      open.push(socket);
      let head = '';
      socket.on('error', reject);
      socket.on('data', (d) => {
        head += d.toString();
        if (head.includes('\r\n'))
          resolve({ status: head.split('\r\n')[0]!, socket: socket.removeAllListeners('data') });
      });
      socket.write(`CONNECT 127.0.0.1:${target.port} HTTP/1.1\r\nhost: x\r\n\r\n`);
    });

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
