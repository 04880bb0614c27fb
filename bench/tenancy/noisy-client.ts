// Client A of the noisy-neighbour bench, in its own process so its load costs the bench's
// measuring process nothing. Several connections send as fast as the gateway answers until the
// parent says `stop`; a 429 is normal and is honoured by waiting its Retry-After. The counts go
// back to the parent over IPC.
//
// Env: NOISY_URL, NOISY_KEY, NOISY_MODE (flood | bombs | refusals | listings), NOISY_CONNECTIONS,
// NOISY_TIMEOUT_MS, NOISY_BOMB_PAIRS, NOISY_BOMB_DOUBLINGS, NOISY_BODY_BYTES, NOISY_BODY_SHAPE.
import { Agent } from 'node:http';
import { codeOf, isReply, send, sleep, type Attempt } from './http.js';

export type NoisyMode = 'flood' | 'bombs' | 'refusals' | 'listings';

export interface NoisyCounts {
  sent: number;
  /** 2xx: accepted (202) or answered (200, possibly with an error outcome). */
  answered: number;
  /** 4xx other than 429: refused requests (the point of the refusal flood). */
  refused: number;
  /** 429s, whatever their code (rate_limited, too_many_in_flight, …). */
  limited: number;
  /** 5xx answers and connection errors. */
  errors: number;
  /** No answer within the per-request deadline. */
  timeouts: number;
  /** Still in flight when the phase ended (cut, not counted as failures). */
  unfinished: number;
  /** Answers by code: `accepted`, `ok`, `error:policy_denied`, `unknown_tool`, `rate_limited`, … */
  codes: Record<string, number>;
}

interface Shot {
  path: string;
  body: Buffer;
  contentType: string;
  /** POST unless said (the listings are GETs, without a body). */
  method?: 'GET';
}

const url = process.env.NOISY_URL!;
const key = process.env.NOISY_KEY!;
const mode = process.env.NOISY_MODE as NoisyMode;
const connections = Number(process.env.NOISY_CONNECTIONS ?? 4);
const timeoutMs = Number(process.env.NOISY_TIMEOUT_MS ?? 15_000);
const bombPairs = Number(process.env.NOISY_BOMB_PAIRS ?? 22);
const bombDoublings = Number(process.env.NOISY_BOMB_DOUBLINGS ?? 25);
const bodyBytes = Number(process.env.NOISY_BODY_BYTES ?? 1_000_000);
const bodyShape = process.env.NOISY_BODY_SHAPE === 'long' ? 'long' : 'wide';

const json = (v: unknown) => Buffer.from(JSON.stringify(v));
const shell = (command: string): Shot => ({
  path: '/tools/run_shell/execute?wait=false',
  body: json({ command }),
  contentType: 'application/json',
});

/**
 * A JSON object of about `bytes` bytes. `wide` (many short fields) is the worst case for what a
 * refusal stores, as the redaction that shortens long strings leaves it whole, and for parsing;
 * `long` is one long string field.
 */
function body(bytes: number, fields: Record<string, unknown> = {}): Buffer {
  const parts = Object.entries(fields).map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`);
  let size = 2 + parts.join(',').length;
  if (bodyShape === 'long') {
    parts.push(`"padding":"${'x'.repeat(Math.max(0, bytes - size - 13))}"`);
  } else {
    for (let i = 0; size < bytes; i++) {
      const part = `"f${String(i).padStart(6, '0')}":"${'x'.repeat(16)}"`;
      parts.push(part);
      size += part.length + 1;
    }
  }
  return Buffer.from(`{${parts.join(',')}}`);
}

/** What each connection sends, in turn. Bodies are built once: the generator stays cheap. */
function shots(): Shot[] {
  switch (mode) {
    case 'flood':
      // Long sandbox calls, not waited for: each holds a sandbox slot for 5 s.
      return [shell('sleep 5')];
    case 'bombs': {
      const braces = '{,}'.repeat(bombPairs);
      return [
        // 2^pairs words from a 3·pairs-character line.
        shell(`echo ${braces}`),
        // A value that doubles on every assignment: 2^doublings characters.
        shell(`a=x; ${Array.from({ length: bombDoublings }, () => 'a=$a$a;').join(' ')} echo "$a"`),
        // Command substitutions nested 16 deep around a smaller brace bomb.
        shell(`echo ${'$(echo '.repeat(16)}${'{,}'.repeat(bombPairs - 2)}${')'.repeat(16)}`),
      ];
    }
    case 'refusals':
      return [
        {
          path: '/tools/no_such_tool/execute',
          body: body(bodyBytes),
          contentType: 'application/json',
        },
        {
          // A's scope leaves run_python out.
          path: '/tools/run_python/execute',
          body: body(bodyBytes, { code: 'print(1)' }),
          contentType: 'application/json',
        },
        {
          // Cut short: invalid only at its last byte (unless a limit comes first).
          path: '/tools/calculator/execute',
          body: body(bodyBytes, { expression: '1+1' }).subarray(0, -1),
          contentType: 'application/json',
        },
        {
          // The same megabyte in UTF-16 (issue 19): refused by its charset, before it is read.
          path: '/tools/calculator/execute',
          body: Buffer.from(body(bodyBytes / 2, { expression: '1+1' }).toString(), 'utf16le'),
          contentType: 'application/json; charset=utf-16le',
        },
      ];
    case 'listings': {
      // Listings over A's index of results at calls.maxResultBytes (filled by the parent):
      // a filter that matches the newest call, one that matches none (the whole index is
      // scanned), the whole page, and the stats.
      const get = (path: string): Shot => ({
        path,
        body: Buffer.alloc(0),
        contentType: 'application/json',
        method: 'GET',
      });
      return [
        get('/v1/calls?status=ok&limit=1'),
        get('/v1/calls?tool=calculator&limit=200'),
        get('/v1/calls?limit=200'),
        get('/v1/stats'),
      ];
    }
  }
}

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
const agent = new Agent({ keepAlive: true, maxSockets: connections });
const stopSending = new AbortController();
const cutInFlight = new AbortController();

function record(a: Attempt): number {
  const count = (code: string) => (counts.codes[code] = (counts.codes[code] ?? 0) + 1);
  if (!isReply(a)) {
    if (cutInFlight.signal.aborted) counts.unfinished++;
    else if (a.status === 'timeout') counts.timeouts++;
    else counts.errors++;
    count(cutInFlight.signal.aborted ? 'unfinished' : a.status);
    return 50; // back off briefly instead of spinning on a dead socket
  }
  count(codeOf(a));
  if (a.status === 429) {
    counts.limited++;
    const retryAfter = Number(a.headers['retry-after']);
    return Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : 1000;
  }
  if (a.status >= 500) counts.errors++;
  else if (a.status >= 400) counts.refused++;
  else counts.answered++;
  return 0;
}

async function connection(list: Shot[], offset: number): Promise<void> {
  for (let i = offset; !stopSending.signal.aborted; i++) {
    const shot = list[i % list.length]!;
    counts.sent++;
    const attempt = await send(url + shot.path, {
      agent,
      method: shot.method ?? 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': shot.contentType },
      ...(shot.method === 'GET' ? {} : { body: shot.body }),
      timeoutMs,
      signal: cutInFlight.signal,
    });
    const wait = record(attempt);
    if (wait > 0) await sleep(wait, stopSending.signal);
  }
}

process.on('message', (m) => {
  if (m !== 'stop') return;
  stopSending.abort();
  // Calls in flight get a moment to finish, then are cut: the phase is over.
  setTimeout(() => cutInFlight.abort(), 1000).unref();
});

const list = shots();
const loops = Array.from({ length: connections }, (_, i) => connection(list, i));
process.send!('started');
await Promise.all(loops);
agent.destroy();
process.send!({ counts }, () => process.disconnect());
