/**
 * A small MCP server of our own over Streamable HTTP (the server SDK, stateful sessions), for
 * what server-everything cannot show: whether a cancel reaches the upstream, a tool list that
 * changes, a huge tools/list, an `isError` result, an upstream that goes away. Loopback only.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server, type CallToolResult, type Tool } from '@modelcontextprotocol/server';
import { NodeStreamableHTTPServerTransport } from '@modelcontextprotocol/node';

export interface TestUpstream {
  url: string;
  /** Calls whose request the client cancelled (the handler's signal fired), by `text` argument. */
  cancelled: string[];
  /** `_meta` of every tools/call received. */
  metas: Record<string, unknown>[];
  /** Methods of the notifications the client sent (`notifications/cancelled`, …). */
  notifications: string[];
  /** The most `slow` calls running at once so far. */
  readonly maxInFlight: number;
  /** Adds a tool named `name` and tells every session the list changed. */
  addTool(name: string): void;
  /** Gives tool `name` a new description (a rug pull) and tells every session the list changed. */
  setDescription(name: string, description: string): void;
  /** Forgets every session, as a restarted server would: their next request gets a 404. */
  forgetSessions(): Promise<void>;
  close(): Promise<void>;
}

export interface TestUpstreamOptions {
  /** Extra filler tools `t0000…` in the list (a hostile catalog). */
  filler?: number;
  /** One tool with a description this long. */
  hugeDescription?: number;
  /** Tools per tools/list page (paginated when smaller than the list). */
  pageSize?: number;
  /** Also a tool `chatty` that sends 20,000 log notifications, then answers. */
  chatty?: boolean;
  /** Descriptions in place of the built-in ones, by tool name. */
  descriptions?: Record<string, string>;
  /** Answers requests with plain JSON rather than an event stream (`enableJsonResponse`). */
  jsonResponse?: boolean;
  /** More tools by name (any characters), each answering `ok: <name>`. */
  extraTools?: string[];
}

const object = (properties: Record<string, unknown>, required: string[] = []) => ({
  type: 'object' as const,
  properties,
  required,
});

export async function startTestUpstream(options: TestUpstreamOptions = {}): Promise<TestUpstream> {
  const cancelled: string[] = [];
  const metas: Record<string, unknown>[] = [];
  const notifications: string[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const extra: string[] = [];
  const descriptions = new Map(Object.entries(options.descriptions ?? {}));
  const servers = new Set<Server>();
  const tools = (): Tool[] =>
    listed().map((t) =>
      descriptions.has(t.name) ? { ...t, description: descriptions.get(t.name)! } : t,
    );
  const listed = (): Tool[] => [
    {
      name: 'echo',
      description: 'Says the text back',
      inputSchema: object({ text: { type: 'string', maxLength: 100 } }, ['text']),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    { name: 'fail', description: 'Always fails', inputSchema: object({}) },
    { name: 'flood', description: 'Answers with 10 MB of text', inputSchema: object({}) },
    {
      name: 'slow',
      description: 'Reports progress and logs, then waits ms',
      inputSchema: object({ text: { type: 'string' }, ms: { type: 'integer', minimum: 0 } }, [
        'text',
        'ms',
      ]),
    },
    {
      name: 'sum',
      description: 'Adds two numbers',
      inputSchema: object({ a: { type: 'number' }, b: { type: 'number' } }, ['a', 'b']),
      outputSchema: object({ sum: { type: 'number' } }, ['sum']),
    },
    ...(options.chatty
      ? [
          {
            name: 'chatty',
            description: 'Sends 20,000 log notifications, then answers',
            inputSchema: object({}),
          },
        ]
      : []),
    ...[...extra, ...(options.extraTools ?? [])].map((name) => ({
      name,
      description: `added later: ${name}`,
      inputSchema: object({}),
    })),
    ...Array.from({ length: options.filler ?? 0 }, (_, i) => ({
      name: `t${String(i).padStart(4, '0')}`,
      description: 'filler',
      inputSchema: object({}),
    })),
    ...(options.hugeDescription
      ? [
          {
            name: 'huge',
            description: 'x'.repeat(options.hugeDescription),
            inputSchema: object({}),
          },
        ]
      : []),
  ];

  const makeServer = (): Server => {
    const server = new Server(
      { name: 'test-upstream', version: '1.0.0' },
      { capabilities: { tools: { listChanged: true }, logging: {} } },
    );
    server.setRequestHandler('tools/list', (request) => {
      const all = tools();
      const size = options.pageSize ?? all.length;
      const start = Number(request.params?.cursor ?? 0);
      const next = start + size;
      return {
        tools: all.slice(start, next),
        ...(next < all.length ? { nextCursor: String(next) } : {}),
      };
    });
    server.setRequestHandler('tools/call', async (request, ctx): Promise<CallToolResult> => {
      const args = (request.params.arguments ?? {}) as {
        text?: string;
        ms?: number;
        a?: number;
        b?: number;
      };
      metas.push({ ...(request.params._meta ?? {}) });
      switch (request.params.name) {
        case 'echo':
          return { content: [{ type: 'text', text: `echo: ${args.text}` }] };
        case 'flood':
          return { content: [{ type: 'text', text: 'x'.repeat(10_000_000) }] };
        case 'fail':
          return { content: [{ type: 'text', text: 'it went wrong upstream' }], isError: true };
        case 'chatty':
          // A moment first: a test's event stream, opened after the call began, is listening
          // before the flood (this server shares the test's process and its event loop).
          await new Promise((r) => setTimeout(r, 1000));
          // ~3 MB of events: under the 8 MiB response cap, so the call answers. Sent a thousand
          // at a time, each batch awaited.
          for (let i = 0; i < 20_000; i += 1000)
            await Promise.all(
              Array.from({ length: 1000 }, (_, j) =>
                ctx.mcpReq.notify({
                  method: 'notifications/message',
                  params: { level: 'info', data: `chatty line ${i + j}` },
                }),
              ),
            );
          return { content: [{ type: 'text', text: 'chatted' }] };
        case 'sum':
          return {
            content: [{ type: 'text', text: String(args.a! + args.b!) }],
            structuredContent: { sum: args.a! + args.b! },
          };
        case 'slow': {
          const token = ctx.mcpReq._meta?.progressToken;
          if (token !== undefined)
            await ctx.mcpReq.notify({
              method: 'notifications/progress',
              params: { progressToken: token, progress: 1, total: 2, message: 'started' },
            });
          await ctx.mcpReq.notify({
            method: 'notifications/message',
            params: { level: 'info', data: `working on ${args.text}` },
          });
          const signal = ctx.mcpReq.signal;
          maxInFlight = Math.max(maxInFlight, ++inFlight);
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, args.ms);
            signal.addEventListener(
              'abort',
              () => {
                clearTimeout(timer);
                cancelled.push(args.text ?? '');
                resolve();
              },
              { once: true },
            );
          });
          inFlight--;
          return { content: [{ type: 'text', text: `done ${args.text}` }] };
        }
        default:
          if (extra.includes(request.params.name))
            return { content: [{ type: 'text', text: 'ok' }] };
          if (options.extraTools?.includes(request.params.name))
            return { content: [{ type: 'text', text: `ok: ${request.params.name}` }] };
          return {
            content: [{ type: 'text', text: `no tool ${request.params.name}` }],
            isError: true,
          };
      }
    });
    return server;
  };

  const sessions = new Map<string, NodeStreamableHTTPServerTransport>();
  const http: HttpServer = createServer((req, res) => {
    void (async () => {
      const sid = req.headers['mcp-session-id'];
      let transport = typeof sid === 'string' ? sessions.get(sid) : undefined;
      if (typeof sid === 'string' && !transport) {
        // As the spec says a server does for a session it does not know.
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            jsonrpc: '2.0',
            error: { code: -32001, message: 'Session not found' },
            id: null,
          }),
        );
        return;
      }
      if (!transport) {
        const created = new NodeStreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          ...(options.jsonResponse ? { enableJsonResponse: true } : {}),
          onsessioninitialized: (id) => {
            sessions.set(id, created);
          },
        });
        const server = makeServer();
        servers.add(server);
        created.onclose = () => servers.delete(server);
        await server.connect(created);
        transport = created;
      }
      // Read here to see the client's notifications; the transport takes the parsed body.
      let body: unknown;
      if (req.method === 'POST') {
        const chunks: Buffer[] = [];
        for await (const chunk of req) chunks.push(chunk as Buffer);
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        for (const m of Array.isArray(body) ? body : [body]) {
          const message = m as { method?: string; id?: unknown };
          if (message.method?.startsWith('notifications/') && message.id === undefined)
            notifications.push(message.method);
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
    cancelled,
    metas,
    notifications,
    get maxInFlight() {
      return maxInFlight;
    },
    addTool(name) {
      extra.push(name);
      for (const server of servers) void server.sendToolListChanged().catch(() => undefined);
    },
    setDescription(name, description) {
      descriptions.set(name, description);
      for (const server of servers) void server.sendToolListChanged().catch(() => undefined);
    },
    async forgetSessions() {
      const all = [...sessions.values()];
      sessions.clear();
      for (const t of all) await t.close().catch(() => undefined);
    },
    async close() {
      for (const t of sessions.values()) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
