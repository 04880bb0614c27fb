/**
 * The bounds on requests an upstream sends toolgate: per call, outstanding per session, what is
 * answered, what a call's end drops, how refusals are logged; and, against a real loopback
 * server that holds every reply, the sockets the replies take.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError, parseConfig } from '@toolgate/config';
import { createGuardedFetch } from '@toolgate/tools';
import { afterEach, describe, expect, it } from 'vitest';
import { postMessage } from './http-call.js';
import { REPLY_CONNECTIONS, ServerRequests, type ReplySender } from './server-requests.js';

const upstream = (perCall: number, perSession: number) => ({
  id: 'up',
  serverRequests: { perCall, perSession },
});

/** A sender whose every reply is held until its signal aborts, as a hostile server holds it. */
function heldSender() {
  const sent: { message: Record<string, unknown>; signal: AbortSignal }[] = [];
  const send: ReplySender = (message, signal) => {
    sent.push({ message, signal });
    return new Promise((resolve) => signal.addEventListener('abort', () => resolve()));
  };
  return { sent, send };
}

const settle = () => new Promise((r) => setTimeout(r, 0));

describe('serverRequests config', () => {
  it('defaults to 16 per call and 64 per session, and refuses what is out of bounds', () => {
    const url = 'http://127.0.0.1:1/mcp';
    expect(parseConfig({ upstreams: [{ id: 'a', url }] }).upstreams[0]!.serverRequests).toEqual({
      perCall: 16,
      perSession: 64,
    });
    expect(
      parseConfig({ upstreams: [{ id: 'a', url, serverRequests: { perCall: 0 } }] }).upstreams[0]!
        .serverRequests,
    ).toEqual({ perCall: 0, perSession: 64 });
    for (const serverRequests of [{ perCall: -1 }, { perSession: 5000 }, { perMinute: 1 }])
      expect(() => parseConfig({ upstreams: [{ id: 'a', url, serverRequests }] })).toThrow(
        ConfigError,
      );
  });
});

describe('ServerRequests', () => {
  it('answers perCall per call and perSession outstanding; the rest are not sent at all', async () => {
    const warnings: object[] = [];
    const requests = new ServerRequests(upstream(3, 5), { warn: (o) => warnings.push(o) });
    const { sent, send } = heldSender();
    const a = requests.beginCall();
    const b = requests.beginCall();
    const answeredA = Array.from({ length: 10 }, (_, i) =>
      requests.answer({ id: `a${i}`, method: 'roots/list' }, send, a),
    );
    expect(answeredA.filter(Boolean)).toHaveLength(3);
    // b has its own perCall, but the session has only 2 of its 5 left
    const answeredB = Array.from({ length: 10 }, (_, i) =>
      requests.answer({ id: `b${i}`, method: 'ping' }, send, b),
    );
    expect(answeredB.filter(Boolean)).toHaveLength(2);
    // nor the session's own streams
    expect(requests.answer({ id: 's0', method: 'ping' }, send)).toBe(false);
    expect(sent).toHaveLength(5);
    expect(requests.pending).toBe(5);
    expect(requests.refused).toBe(7 + 8 + 1);

    // "method not found" for what toolgate does not serve; a ping's empty result
    expect(sent[0]!.message).toEqual({
      id: 'a0',
      error: { code: -32601, message: 'toolgate does not serve roots/list' },
    });
    expect(sent[3]!.message).toEqual({ id: 'b0', result: {} });

    // a's answer is in: its three replies are dropped, room for the session's again
    requests.endCall(a);
    expect(sent.slice(0, 3).every((s) => s.signal.aborted)).toBe(true);
    expect(sent.slice(3).some((s) => s.signal.aborted)).toBe(false);
    await settle();
    expect(requests.pending).toBe(2);
    expect(requests.answer({ id: 's1', method: 'ping' }, send)).toBe(true);
    // an ended call's stream gets nothing more
    expect(requests.answer({ id: 'a-late', method: 'ping' }, send, a)).toBe(false);

    // refusals are logged once at first, not once each
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ upstream: 'up', unanswered: 1, perCall: 3, perSession: 5 });

    requests.close();
    expect(sent.every((s) => s.signal.aborted)).toBe(true);
    await settle();
    expect(requests.pending).toBe(0);
    expect(requests.answer({ id: 'after', method: 'ping' }, send)).toBe(false);
  });

  it('perCall 0 answers nothing on a call', () => {
    const requests = new ServerRequests(upstream(0, 64));
    const { sent, send } = heldSender();
    expect(requests.answer({ id: 1, method: 'ping' }, send, requests.beginCall())).toBe(false);
    expect(sent).toHaveLength(0);
    requests.close();
  });
});

describe('replies to a server that holds them', () => {
  const servers: { close(): void }[] = [];
  afterEach(() => {
    for (const s of servers.splice(0)) s.close();
  });

  it(`take at most ${REPLY_CONNECTIONS} sockets, and a call's end lets them go`, async () => {
    let accepted = 0;
    let open = 0;
    let received = 0;
    const held: ServerResponse[] = [];
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.on('end', () => {
        received++;
        held.push(res);
      });
    });
    server.on('connection', (socket) => {
      accepted++;
      open++;
      socket.on('close', () => open--);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    servers.push({
      close: () => {
        server.closeAllConnections();
        server.close();
      },
    });
    const { port } = server.address() as AddressInfo;

    const fetch = createGuardedFetch({ allowPrivateNetworks: false, allowHosts: ['127.0.0.1'] });
    const replies = fetch.withConnectionLimit(REPLY_CONNECTIONS);
    const session = { url: new URL(`http://127.0.0.1:${port}/mcp`), headers: {} };
    const send: ReplySender = (message, signal) => postMessage(replies, session, message, signal);
    const requests = new ServerRequests(upstream(64, 64));
    const call = requests.beginCall();
    for (let i = 0; i < 200; i++) requests.answer({ id: i, method: 'roots/list' }, send, call);
    expect(requests.pending).toBe(64);
    for (let i = 0; i < 100 && received < REPLY_CONNECTIONS; i++)
      await new Promise((r) => setTimeout(r, 20));
    // give the agent a moment to (wrongly) open more
    await new Promise((r) => setTimeout(r, 200));
    expect(received).toBe(REPLY_CONNECTIONS);
    expect(accepted).toBe(REPLY_CONNECTIONS);

    requests.endCall(call);
    for (let i = 0; i < 100 && (requests.pending > 0 || open > 0); i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(requests.pending).toBe(0);
    expect(open).toBe(0);
    // the queued replies were dropped, never sent
    expect(received).toBe(REPLY_CONNECTIONS);
    expect(accepted).toBe(REPLY_CONNECTIONS);
    await replies.close();
    await fetch.close();
  });
});
