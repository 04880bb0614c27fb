import { request as httpRequest, createServer, type Server } from 'node:http';

/**
 * A loopback HTTP proxy that adds a client key to every request and forwards everything else
 * as it came — Host and Origin included — and streams the answer back (SSE too). For clients
 * that cannot send headers, like the MCP conformance CLI.
 */
export async function startKeyProxy(
  target: string,
  key: string,
): Promise<{ url: string; close(): Promise<void> }> {
  const { hostname, port } = new URL(target);
  const server: Server = createServer((req, res) => {
    const upstream = httpRequest(
      {
        hostname,
        port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, authorization: `Bearer ${key}` },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    res.on('close', () => upstream.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
