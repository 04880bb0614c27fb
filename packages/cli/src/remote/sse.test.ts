/**
 * The SSE reader's reconnect: a server that drops the connection mid-stream (which a real gateway
 * does only on a crash or a proxy's timeout, hence a small node:http server here).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ExitError } from '../command.js';
import { sse, type SseEvent } from './sse.js';

let server: Server | undefined;
afterEach(() => {
  server?.closeAllConnections();
  server?.close();
});

async function listen(handler: Parameters<typeof createServer>[1]) {
  server = createServer(handler);
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, headers: { authorization: 'Bearer k' } };
}

describe('sse', () => {
  it('reconnects after a drop with Last-Event-ID: every event once, in order', async () => {
    const asked: (string | undefined)[] = [];
    const gw = await listen((req, res) => {
      asked.push(req.headers['last-event-id'] as string | undefined);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (asked.length === 1) {
        res.write('retry: 10\n\nid: 1\nevent: output\ndata: {"text":"a"}\n\n');
        res.write('id: 2\nevent: output\ndata: {"text":"b"}\n\n');
        // Half an event, then the connection drops.
        res.write('id: 3\nevent: out');
        setTimeout(() => res.socket?.destroy(), 50);
      } else {
        res.write(
          'id: 3\nevent: output\ndata: {"text":"c"}\n\nid: 4\nevent: outcome\ndata: {}\n\n',
        );
      }
    });
    const seen: SseEvent[] = [];
    const done = new AbortController();
    const reconnects: string[] = [];
    await sse(
      gw,
      '/events',
      (e) => {
        seen.push(e);
        if (e.event === 'outcome') done.abort();
      },
      done.signal,
      { onReconnect: (why) => reconnects.push(why) },
    );
    expect(seen.map((e) => `${e.id}:${e.event}`)).toEqual([
      '1:output',
      '2:output',
      '3:output',
      '4:outcome',
    ]);
    expect(asked).toEqual([undefined, '2']);
    expect(reconnects).toHaveLength(1);
  });

  it('a refusal on the first connection is an ExitError with the API error line', async () => {
    const gw = await listen((_req, res) => {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"code":"not_found","message":"no such call"}}');
    });
    const failed = await sse(gw, '/events', () => {}, new AbortController().signal).catch(
      (err: unknown) => err,
    );
    expect(failed).toBeInstanceOf(ExitError);
    expect(failed).toMatchObject({ exitCode: 1, message: 'toolgate: 404 not_found: no such call' });
  });
});
