// Client A of the noisy-neighbour bench, "held connections" phase, in its own process: it starts
// one long sandbox call of its own and then tries to hold as many gateway connections as it can
// on it, the ways issue 19 found: a burst of simultaneous event streams, MCP `tasks/result`
// long-polls, and clients that send the request and reset the connection within a few ms (a
// burst of them every second). Streams that open are held (and reopened if one ends) until the
// parent says `stop`; a refused one retries after its Retry-After, as the other attackers do.
// The counts go back over IPC as theirs do.
//
// Env: NOISY_URL, NOISY_KEY, NOISY_TIMEOUT_MS, HELD_CALL_SECONDS (how long A's call runs),
// HELD_BURST (200) simultaneous streams, HELD_POLLS (50) tasks/result, HELD_HANGUPS (120)
// send-and-reset connections a second.
import { Agent, request, type ClientRequest, type IncomingMessage } from 'node:http';
import { connect } from 'node:net';
import { codeOf, send, sleep } from './http.js';
import type { NoisyCounts } from './noisy-client.js';

const url = new URL(process.env.NOISY_URL!);
const key = process.env.NOISY_KEY!;
const timeoutMs = Number(process.env.NOISY_TIMEOUT_MS ?? 15_000);
const callSeconds = Number(process.env.HELD_CALL_SECONDS ?? 30);
const burst = Number(process.env.HELD_BURST ?? 200);
const polls = Number(process.env.HELD_POLLS ?? 50);
const hangups = Number(process.env.HELD_HANGUPS ?? 120);

const counts: NoisyCounts = {
  sent: 0,
  answered: 0,
  refused: 0,
  limited: 0,
  errors: 0,
  timeouts: 0,
  unfinished: 0,
  codes: {},
};
const count = (code: string) => (counts.codes[code] = (counts.codes[code] ?? 0) + 1);
const stopping = new AbortController();
const open = new Set<ClientRequest>();
// No pooling: every held request is a connection of its own, as many clients would be.
const agent = new Agent({ keepAlive: false, maxSockets: Infinity });

/** Tallies an answer's status; 200 on a held request means it is open now. */
function tally(res: IncomingMessage, body: string): void {
  if (res.statusCode === 200) {
    counts.answered++;
    count('held');
  } else if (res.statusCode === 429) {
    counts.limited++;
    count(codeOf({ status: 429, headers: res.headers, body, ms: 0 }));
  } else if ((res.statusCode ?? 500) >= 500) {
    counts.errors++;
    count(String(res.statusCode));
  } else {
    counts.refused++;
    count(String(res.statusCode));
  }
}

/**
 * One held request (an event stream, or a `tasks/result` POST): resolves when it ends or is
 * refused, with how long to wait before trying again. An open one is held until stop.
 */
function hold(path: string, body?: string): Promise<number> {
  counts.sent++;
  return new Promise((resolve) => {
    const req = request(new URL(path, url), {
      agent,
      method: body ? 'POST' : 'GET',
      headers: {
        authorization: `Bearer ${key}`,
        ...(body
          ? { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
          : {}),
      },
    });
    open.add(req);
    let wait = 1000;
    const done = () => {
      open.delete(req);
      resolve(wait);
    };
    req.on('response', (res) => {
      if (res.statusCode === 200) {
        tally(res, '');
        res.resume();
        res.on('end', done).on('close', done).on('error', done);
        return;
      }
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => {
        tally(res, text);
        const retryAfter = Number(res.headers['retry-after']);
        if (Number.isFinite(retryAfter) && retryAfter > 0) wait = retryAfter * 1000;
        done();
      });
      res.on('error', done);
    });
    req.on('error', () => {
      if (!stopping.signal.aborted) counts.errors++;
      done();
    });
    req.end(body);
  });
}

/** Every second, `hangups` clients send the request and reset within 1–5 ms, all at once. */
async function hangUps(): Promise<void> {
  const text =
    `GET /v1/calls/${callId}/events HTTP/1.1\r\nHost: ${url.host}\r\n` +
    `Authorization: Bearer ${key}\r\n\r\n`;
  const one = () =>
    new Promise<void>((resolve) => {
      counts.sent++;
      count('hung-up');
      const socket = connect(Number(url.port), url.hostname, () => {
        socket.write(text);
        setTimeout(() => socket.resetAndDestroy(), 1 + Math.floor(Math.random() * 5));
      });
      socket.on('error', () => resolve());
      socket.on('close', () => resolve());
    });
  while (!stopping.signal.aborted) {
    await Promise.all(Array.from({ length: hangups }, one));
    await sleep(1000, stopping.signal);
  }
}

/** Keeps `path` held: reopens it a second after it ends, after its Retry-After when refused. */
async function keep(path: string, body?: string): Promise<void> {
  while (!stopping.signal.aborted) await sleep(await hold(path, body), stopping.signal);
}

// A's own long call: the one thing it may watch.
const started = await send(`${url.origin}/tools/run_shell/execute?wait=false`, {
  agent,
  method: 'POST',
  headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ command: `sleep ${callSeconds}`, timeoutSeconds: callSeconds + 5 }),
  timeoutMs,
});
const callId = 'body' in started ? (JSON.parse(started.body) as { id?: string }).id : undefined;
if (!callId) throw new Error(`client A could not start its call: ${JSON.stringify(started)}`);

const events = `/v1/calls/${callId}/events`;
const poll = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'tasks/result',
  params: { taskId: callId },
});
process.send!('started');
const loops = [
  ...Array.from({ length: burst }, () => keep(events)),
  ...Array.from({ length: polls }, () => keep('/mcp', poll)),
  hangUps(),
];

process.on('message', (m) => {
  if (m !== 'stop') return;
  stopping.abort();
  counts.unfinished = open.size;
  for (const req of open) req.destroy();
  // A's call ends with the phase, so the next one starts without it.
  void send(`${url.origin}/v1/calls/${callId}/cancel`, {
    agent,
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    timeoutMs,
  });
});

await Promise.all(loops);
agent.destroy();
process.send!({ counts }, () => process.disconnect());
