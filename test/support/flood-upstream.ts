/**
 * A hostile MCP server over Streamable HTTP, written by hand so that it costs the test's process
 * next to nothing (its pages are serialised once): it sends `notifications/tools/list_changed`
 * on the session's event stream every `everyMs`, and serves `pages` pages of tools/list of
 * about `pageBytes` each. It counts the tools/list requests it is sent. Loopback only.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FloodUpstream {
  url: string;
  /** tools/list requests received, each with the cursor it named (`null`: the first page). */
  readonly lists: (string | null)[];
  /** list_changed notifications sent. */
  readonly notified: number;
  close(): Promise<void>;
}

export interface FloodUpstreamOptions {
  pages: number;
  pageBytes: number;
  /** How often list_changed is sent on each open event stream (0: never). */
  everyMs: number;
  /** Bytes of each tool's definition (default 60,000: under the 64 KiB one may have). */
  toolBytes?: number;
}

export async function startFloodUpstream(options: FloodUpstreamOptions): Promise<FloodUpstream> {
  const lists: (string | null)[] = [];
  let notified = 0;
  const toolBytes = options.toolBytes ?? 60_000;
  const perPage = Math.max(1, Math.round(options.pageBytes / toolBytes));
  const pages = Array.from({ length: options.pages }, (_, p) =>
    JSON.stringify({
      tools: Array.from({ length: perPage }, (_, i) => ({
        name: `p${p}t${String(i).padStart(4, '0')}`,
        description: 'x'.repeat(toolBytes - 100),
        inputSchema: { type: 'object' },
      })),
      ...(p + 1 < options.pages ? { nextCursor: String(p + 1) } : {}),
    }),
  );
  const sessions = new Set<string>();
  const streams = new Set<ServerResponse>();
  const timer = setInterval(() => {
    if (options.everyMs === 0) return;
    for (const res of streams) {
      notified++;
      res.write(
        `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' })}\n\n`,
      );
    }
  }, options.everyMs || 60_000);

  const http = createServer((req, res) => {
    void (async () => {
      const sid = req.headers['mcp-session-id'];
      if (req.method === 'GET') {
        if (typeof sid !== 'string' || !sessions.has(sid)) return void res.writeHead(404).end();
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        res.flushHeaders();
        streams.add(res);
        res.on('close', () => streams.delete(res));
        return;
      }
      if (req.method === 'DELETE') {
        if (typeof sid === 'string') sessions.delete(sid);
        return void res.writeHead(200).end();
      }
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        id?: string | number;
        method: string;
        params?: { cursor?: string };
      };
      if (message.id === undefined) return void res.writeHead(202).end();
      const answer = (result: string, headers: Record<string, string> = {}) => {
        res.writeHead(200, { 'content-type': 'application/json', ...headers });
        res.end(`{"jsonrpc":"2.0","id":${JSON.stringify(message.id)},"result":${result}}`);
      };
      if (message.method === 'initialize') {
        const id = randomUUID();
        sessions.add(id);
        answer(
          JSON.stringify({
            protocolVersion: '2025-11-25',
            capabilities: { tools: { listChanged: true } },
            serverInfo: { name: 'flood-upstream', version: '1.0.0' },
          }),
          { 'mcp-session-id': id },
        );
        return;
      }
      if (typeof sid !== 'string' || !sessions.has(sid)) return void res.writeHead(404).end();
      if (message.method === 'tools/list') {
        const cursor = message.params?.cursor ?? null;
        lists.push(cursor);
        answer(pages[Number(cursor ?? 0)] ?? '{"tools":[]}');
        return;
      }
      answer('{}');
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    lists,
    get notified() {
      return notified;
    },
    async close() {
      clearInterval(timer);
      for (const res of streams) res.end();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
