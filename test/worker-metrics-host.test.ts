/**
 * The worker's /metrics names clients and tools: it listens on the configured host
 * (`server.host`, as the gateway's metrics do), not on every interface.
 */
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startStack, type Stack } from './support/stack.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ config: { server: { port: 0, host: '127.0.0.1' } } });
});
afterAll(async () => {
  await stack?.close();
});

/** Whether a TCP connection to host:port is accepted. */
function reachable(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

it('with server.host 127.0.0.1 the worker’s /metrics answers on 127.0.0.1 only', async () => {
  const port = await stack.worker!.serveMetrics(0);
  expect(port).toBeGreaterThan(0);
  const metrics = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(metrics.status).toBe(200);
  // Every other address of this machine (::1, the LAN's, docker's bridge) is refused.
  const others = Object.values(networkInterfaces())
    .flatMap((list) => list ?? [])
    .map((a) => a.address)
    .filter((a) => a !== '127.0.0.1' && !a.startsWith('fe80:'));
  expect(others.length).toBeGreaterThan(0);
  for (const address of others) expect(await reachable(address, port!), address).toBe(false);
});
