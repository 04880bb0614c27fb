/**
 * A small MCP upstream for the cancel measurement (the server SDK over Streamable HTTP,
 * stateful sessions, loopback only): its `slow` tool waits `ms` and notes when it started and
 * when the cancel reached it — the `notifications/cancelled` message's arrival at the HTTP
 * server, or the handler's signal firing (a stream closed by the client), whichever is first.
 * Runs in the bench's own process so both ends of a measurement read one clock.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { NodeStreamableHTTPServerTransport } from '@modelcontextprotocol/node';
import { Server, type CallToolResult } from '@modelcontextprotocol/server';

export interface SlowUpstream {
  url: string;
  /** Resolves when the `slow` call tagged `tag` is running in its handler. */
  started(tag: string): Promise<void>;
  /** Resolves with performance.now() when the cancel of the call tagged `tag` arrived. */
  cancelled(tag: string): Promise<number>;
  close(): Promise<void>;
}

/** A value set once, awaited by whoever asks first or later. */
function once<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  let set = false;
  return {
    promise,
    set(v: T) {
      if (set) return;
      set = true;
      resolve(v);
    },
  };
}

export async function startSlowUpstream(): Promise<SlowUpstream> {
  const starts = new Map<string, ReturnType<typeof once<void>>>();
  const cancels = new Map<string, ReturnType<typeof once<number>>>();
  /** JSON-RPC request id of each running call (per session), to read a cancel's requestId. */
  const tagOfRequest = new Map<string, string>();
  const slot = <T>(map: Map<string, ReturnType<typeof once<T>>>, tag: string) => {
    let s = map.get(tag);
    if (!s) map.set(tag, (s = once<T>()));
    return s;
  };

  const makeServer = (sessionKey: () => string): Server => {
    const server = new Server(
      { name: 'bench-slow-upstream', version: '1.0.0' },
      { capabilities: { tools: {} } },
    );
    server.setRequestHandler('tools/list', () => ({
      tools: [
        {
          name: 'slow',
          description: 'Waits ms milliseconds, or until cancelled',
          inputSchema: {
            type: 'object',
            properties: { tag: { type: 'string' }, ms: { type: 'integer', minimum: 0 } },
            required: ['tag', 'ms'],
          },
        },
      ],
    }));
    server.setRequestHandler('tools/call', async (request, ctx): Promise<CallToolResult> => {
      const { tag = '', ms = 0 } = (request.params.arguments ?? {}) as {
        tag?: string;
        ms?: number;
      };
      tagOfRequest.set(`${sessionKey()}/${String(ctx.mcpReq.id)}`, tag);
      const signal = ctx.mcpReq.signal;
      slot(starts, tag).set();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        signal.addEventListener(
          'abort',
          () => {
            slot(cancels, tag).set(performance.now());
            clearTimeout(timer);
            resolve();
          },
          { once: true },
        );
      });
      return { content: [{ type: 'text', text: `done ${tag}` }] };
    });
    return server;
  };

  const sessions = new Map<string, NodeStreamableHTTPServerTransport>();
  const http = createServer((req, res) => {
    void (async () => {
      const sid = req.headers['mcp-session-id'];
      let transport = typeof sid === 'string' ? sessions.get(sid) : undefined;
      if (!transport) {
        const created = new NodeStreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => void sessions.set(id, created),
        });
        await makeServer(() => created.sessionId ?? '').connect(created);
        transport = created;
      }
      let body: unknown;
      if (req.method === 'POST') {
        const chunks: Buffer[] = [];
        for await (const chunk of req) chunks.push(chunk as Buffer);
        const arrived = performance.now();
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        for (const m of Array.isArray(body) ? body : [body]) {
          const message = m as { method?: string; params?: { requestId?: unknown } };
          if (message.method !== 'notifications/cancelled') continue;
          const tag = tagOfRequest.get(`${String(sid)}/${String(message.params?.requestId)}`);
          if (tag !== undefined) slot(cancels, tag).set(arrived);
        }
      }
      await transport.handleRequest(req, res, body);
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    started: (tag) => slot(starts, tag).promise,
    cancelled: (tag) => slot(cancels, tag).promise,
    async close() {
      for (const t of sessions.values()) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
