/**
 * Request bodies (issue 19, item 5): JSON in UTF-8 only, on every route that takes a body, and
 * a body that is refused is answered without being read whole or parsed.
 */
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

/** The issue's body: 44,000 keys, 968 KB in UTF-16 (under the 1 MiB limit), 484 KB in UTF-8. */
function manyKeys(count = 44_000): string {
  const keys = Array.from({ length: count }, (_, i) => `"k${i.toString(36).padStart(4, '0')}":0`);
  return `{"expression":"1+1",${keys.join(',')}}`;
}

// Every route that takes a body, with the key allowed to use it.
const BODY_ROUTES: [method: string, path: string, key: string][] = [
  ['POST', '/tools/calculator/execute', KEYS.alice],
  ['POST', '/v1/tool-calls', KEYS.alice],
  ['POST', '/mcp', KEYS.alice],
  ['POST', '/v1/calls/c_00000000000000000000000000/cancel', KEYS.alice],
  ['POST', '/v1/approvals/a_00000000000000000000000000/approve', KEYS.admin],
  ['POST', '/v1/approvals/a_00000000000000000000000000/reject', KEYS.admin],
  ['DELETE', '/v1/workspaces/alice', KEYS.admin],
];

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** The server closed the connection after the answer. */
  closed: boolean;
}

/**
 * Sends `head` and then only `sent` of the body it announces, and reads one answer: a server
 * that waited for the whole body would never answer (the test then times out).
 */
function rawRequest(head: string, sent: Buffer = Buffer.alloc(0)): Promise<RawAnswer> {
  const { hostname, port } = new URL(stack.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    let answer: Omit<RawAnswer, 'closed'> | undefined;
    socket.on('data', (chunk) => {
      chunks.push(chunk);
      answer ??= parseAnswer(chunks);
      // A connection kept open: the answer is complete, stop here.
      if (answer && answer.headers.connection !== 'close') {
        socket.destroy();
        resolve({ ...answer, closed: false });
      }
    });
    socket.on('end', () => {
      if (answer) resolve({ ...answer, closed: true });
      else reject(new Error(`closed without an answer: ${Buffer.concat(chunks).toString()}`));
    });
    socket.on('error', reject);
    socket.write(head);
    socket.write(sent);
  });
}

/** The first answer in what was received, once it is complete. */
function parseAnswer(chunks: Buffer[]): Omit<RawAnswer, 'closed'> | undefined {
  const all = Buffer.concat(chunks);
  const end = all.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine, ...lines] = all.subarray(0, end).toString('latin1').split('\r\n');
  const headers = Object.fromEntries(
    lines.map((l) => [
      l.slice(0, l.indexOf(':')).toLowerCase(),
      l.slice(l.indexOf(':') + 1).trim(),
    ]),
  );
  const length = Number(headers['content-length']);
  if (all.length < end + 4 + length) return undefined;
  return {
    status: Number(statusLine!.split(' ')[1]),
    headers,
    body: all.subarray(end + 4, end + 4 + length).toString('utf8'),
  };
}

/**
 * A client as many are (Python's http.client, curl without `Expect`): it sends the whole body,
 * in 64 KiB writes, and only then reads the answer. A server that closes while the body is
 * still coming resets the connection, and such a client never reads what was answered.
 * Resolves the answer's status and error code, or the socket's error code.
 */
function sendThenRead(path: string, body: Buffer): Promise<string> {
  const { hostname, port } = new URL(stack.url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    const done = (what: string) => {
      socket.destroy();
      resolve(what);
    };
    socket.on('error', (err: NodeJS.ErrnoException) => done(err.code ?? err.message));
    socket.write(head(path, { 'content-type': 'application/json', 'content-length': body.length }));
    let offset = 0;
    const next = () => {
      if (offset >= body.length) return read();
      const piece = body.subarray(offset, (offset += 64 * 1024));
      socket.write(piece, (err) => (err ? undefined : setImmediate(next)));
    };
    const read = () => {
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        const answer = parseAnswer(chunks);
        if (answer) {
          const code = (JSON.parse(answer.body) as { error?: { code?: string } }).error?.code;
          done(`${answer.status} ${code ?? ''}`);
        }
      });
      socket.on('end', () => done('closed without an answer'));
      socket.resume();
    };
    socket.pause();
    next();
  });
}

function head(path: string, headers: Record<string, string | number>): string {
  const lines = Object.entries({
    host: 'localhost',
    authorization: `Bearer ${KEYS.alice}`,
    ...headers,
  });
  return `POST ${path} HTTP/1.1\r\n${lines.map(([k, v]) => `${k}: ${v}`).join('\r\n')}\r\n\r\n`;
}

describe('bodies are JSON in UTF-8', () => {
  it.each(BODY_ROUTES)(
    '%s %s: a UTF-16 body (44,000 keys) is 415 unsupported_media_type, never parsed',
    async (method, path, key) => {
      const body = Buffer.from(manyKeys(), 'utf16le');
      expect(body.length).toBeLessThan(stack.config.server.bodyLimitBytes);
      for (const charset of ['utf-16le', 'UTF-16', 'utf-32', 'latin1', '"iso-8859-1"']) {
        const res = await stack.call(path, {
          method,
          key,
          headers: { 'content-type': `application/json; charset=${charset}` },
          body,
        });
        expect(res.status, charset).toBe(415);
        expect((await res.json()).error, charset).toMatchObject({
          code: 'unsupported_media_type',
          message: expect.stringContaining('UTF-8'),
        });
      }
    },
  );

  it('UTF-8 in any spelling, or no charset at all, is read as before', async () => {
    for (const type of [
      'application/json',
      'application/json; charset=utf-8',
      'application/json;charset=UTF8',
      'application/json; charset="UTF-8"',
      'text/plain',
    ]) {
      const res = await stack.call('/tools/calculator/execute', {
        headers: { 'content-type': type },
        method: 'POST',
        body: JSON.stringify({ expression: '6*7' }),
      });
      expect(await res.json(), type).toMatchObject({ status: 'ok', result: 42 });
    }
    // A UTF-8 byte order mark is dropped; compressed bodies are read once inflated.
    const bom = Buffer.concat([
      Buffer.from([0xef, 0xbb, 0xbf]),
      Buffer.from('{"expression":"2+2"}'),
    ]);
    expect(
      await (await stack.call('/tools/calculator/execute', { body: bom, method: 'POST' })).json(),
    ).toMatchObject({
      result: 4,
    });
    const gzipped = await stack.call('/tools/calculator/execute', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync('{"expression":"3+3"}'),
    });
    expect(await gzipped.json()).toMatchObject({ result: 6 });
  });

  it('an unknown Content-Encoding is 415; a body that inflates past the limit is 413', async () => {
    const res = await stack.call('/tools/calculator/execute', {
      json: { expression: '1' },
      headers: { 'content-encoding': 'compress' },
    });
    expect(res.status).toBe(415);
    expect((await res.json()).error.code).toBe('unsupported_media_type');

    // 20 KB on the wire, 20 MB once inflated.
    const bomb = gzipSync(`{"expression":"1","pad":"${' '.repeat(20 * 1024 * 1024)}"}`);
    expect(bomb.length).toBeLessThan(64 * 1024);
    const inflated = await stack.call('/tools/calculator/execute', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: bomb,
    });
    expect(inflated.status).toBe(413);
    expect((await inflated.json()).error.code).toBe('payload_too_large');
  });
});

describe('a refused body is answered before it is read whole', () => {
  const limit = () => stack.config.server.bodyLimitBytes;

  it('415 for a foreign charset and 413 for a declared length over the limit, with no body sent', async () => {
    const charset = await rawRequest(
      head('/tools/calculator/execute', {
        'content-type': 'application/json; charset=utf-16le',
        'content-length': 946_000,
      }),
    );
    // 946 KB still to come: the connection stays open for it (read and dropped, DRAIN_BYTES).
    expect(charset).toMatchObject({ status: 415, closed: false });
    expect(JSON.parse(charset.body).error.code).toBe('unsupported_media_type');

    const big = await rawRequest(
      head('/tools/calculator/execute', {
        'content-type': 'application/json',
        'content-length': 50 * limit(),
      }),
    );
    expect(big).toMatchObject({ status: 413, closed: true });
    expect(JSON.parse(big.body).error.code).toBe('payload_too_large');
  });

  it('400 at the first fault of a 1 MB body, while the rest is still to come', async () => {
    const body = Buffer.from(manyKeys());
    const keys = await rawRequest(
      head('/tools/calculator/execute', {
        'content-type': 'application/json',
        'content-length': body.length,
      }),
      body.subarray(0, 200_000),
    );
    expect(keys).toMatchObject({ status: 400, closed: false });
    expect(JSON.parse(keys.body).error).toMatchObject({
      code: 'invalid_json',
      message: 'the request body has more than 4096 object keys',
    });

    const broken = `{"expression":"1",,${' '.repeat(900_000)}}`;
    const syntax = await rawRequest(
      head('/v1/tool-calls', {
        'content-type': 'application/json',
        'content-length': broken.length,
      }),
      Buffer.from(broken.slice(0, 100)),
    );
    expect(syntax).toMatchObject({ status: 400, closed: false });
    expect(JSON.parse(syntax.body).error.message).toBe(
      'the request body is not valid JSON: unexpected "," at byte 18 (a key must be a string)',
    );

    // Sent whole, the same bodies get the same answers (the client reads them, no reset).
    const whole = await stack.call('/tools/calculator/execute', { json: broken });
    expect(whole.status).toBe(400);
    expect((await whole.json()).error.code).toBe('invalid_json');
  });

  it('a refused body with up to 4 MiB to come is read to its end: the next request on the connection is answered', async () => {
    const bad = `{"expression":}${' '.repeat(900_000)}`;
    const good = '{"expression":"1+2"}';
    const request = (body: string) =>
      head('/tools/calculator/execute', {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      }) + body;
    const { hostname, port } = new URL(stack.url);
    const socket = connect(Number(port), hostname);
    const received: Buffer[] = [];
    socket.on('data', (c) => received.push(c));
    socket.write(request(bad) + request(good));
    await expect
      .poll(() => Buffer.concat(received).toString(), { timeout: 10_000 })
      .toMatch(/"result":3/);
    const text = Buffer.concat(received).toString();
    socket.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 400 /);
    expect(text).toContain('"invalid_json"');
    expect(text.match(/HTTP\/1\.1 /g)).toHaveLength(2);
  });

  it('a refused chunked body that goes on past 4 MiB is cut: the gateway does not read it forever', async () => {
    const { hostname, port } = new URL(stack.url);
    const socket = connect(Number(port), hostname);
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined);
    socket.write(
      head('/tools/calculator/execute', {
        'content-type': 'application/json',
        'transfer-encoding': 'chunked',
      }) + '2\r\n{,\r\n',
    );
    // 256 KiB chunks until the gateway cuts the connection (or 256 MiB went through).
    const piece = Buffer.from(`40000\r\n${' '.repeat(0x40000)}\r\n`);
    let sent = 0;
    let cut = false;
    while (!cut && sent < 256 * 1024 * 1024) {
      cut = await new Promise<boolean>((resolve) => socket.write(piece, (err) => resolve(!!err)));
      sent += 0x40000;
    }
    await ended;
    expect(sent).toBeLessThan(256 * 1024 * 1024);
    expect(Buffer.concat(received).toString()).toMatch(/^HTTP\/1\.1 400 [^]*"invalid_json"/);
  });

  it('a 2 MB body is answered 413 to a client that reads only once it has sent it all (20 runs), and to node’s http client', async () => {
    const body = Buffer.alloc(2 * 1024 * 1024, 0x20);
    const answers: string[] = [];
    for (let i = 0; i < 20; i++)
      answers.push(await sendThenRead('/tools/calculator/execute', body));
    expect(answers).toEqual(Array(20).fill('413 payload_too_large'));
    // node's client reads while it sends: it read the 413 before, and still does.
    for (let i = 0; i < 20; i++) answers[i] = await httpClientSends(body);
    expect(answers).toEqual(Array(20).fill('413 payload_too_large'));
  });
});

/** node:http's client sends `body` to the calculator; its answer's status and code, or the error. */
function httpClientSends(body: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const req = httpRequest(
      `${stack.url}/tools/calculator/execute`,
      {
        method: 'POST',
        agent: false,
        headers: {
          authorization: `Bearer ${KEYS.alice}`,
          'content-type': 'application/json',
          'content-length': body.length,
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          const code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
          resolve(`${res.statusCode} ${code ?? ''}`);
        });
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    req.end(body);
  });
}

describe('Expect: 100-continue', () => {
  interface ContinueAnswer {
    /** Everything the server sent, 100 Continue included. */
    text: string;
    status: number;
    body: string;
    /** Whether the body was sent (only after a 100 Continue). */
    bodySent: boolean;
  }

  /**
   * Sends `head` (which carries `Expect: 100-continue`) and, only once 100 Continue has come,
   * `body`; resolves with the final answer.
   */
  function withExpect(head: string, body: Buffer): Promise<ContinueAnswer> {
    const { hostname, port } = new URL(stack.url);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname);
      let received = Buffer.alloc(0);
      let bodySent = false;
      socket.on('data', (chunk) => {
        received = Buffer.concat([received, chunk]);
        let rest = received;
        if (rest.toString('latin1').startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
          if (!bodySent) socket.write(body);
          bodySent = true;
          rest = rest.subarray('HTTP/1.1 100 Continue\r\n\r\n'.length);
        }
        const end = rest.indexOf('\r\n\r\n');
        if (end < 0) return;
        const headText = rest.subarray(0, end).toString('latin1');
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(headText)?.[1]);
        if (rest.length < end + 4 + length) return;
        socket.destroy();
        resolve({
          text: received.toString('latin1'),
          status: Number(headText.split(' ')[1]),
          body: rest.subarray(end + 4, end + 4 + length).toString('utf8'),
          bodySent,
        });
      });
      socket.on('error', reject);
      socket.on('end', () => reject(new Error(`closed early: ${received.toString('latin1')}`)));
      socket.write(head);
    });
  }

  const megabyte = Buffer.from(`{"expression":"1","pad":"${' '.repeat(1_000_000)}"}`);

  it.each([
    ['a foreign charset', { 'content-type': 'application/json; charset=utf-16le' }, 415],
    ['an unknown Content-Encoding', { 'content-encoding': 'compress' }, 415],
    ['a Content-Length over the limit', { 'content-length': 2 * 1024 * 1024 + 1 }, 413],
  ])(
    '%s is refused from the headers: no 100 Continue, the body is never sent',
    async (_name, headers, status) => {
      expect(2 * 1024 * 1024).toBeGreaterThan(stack.config.server.bodyLimitBytes);
      const answer = await withExpect(
        head('/tools/calculator/execute', {
          'content-type': 'application/json',
          'content-length': megabyte.length,
          expect: '100-continue',
          ...headers,
        }),
        megabyte,
      );
      expect(answer.status).toBe(status);
      expect(answer.text).not.toContain('100 Continue');
      expect(answer.bodySent).toBe(false);
      // The same error body as the refusal of a request without the expectation.
      const plain = await rawRequest(
        head('/tools/calculator/execute', {
          'content-type': 'application/json',
          'content-length': megabyte.length,
          ...headers,
        }),
      );
      expect(plain.status).toBe(status);
      expect(JSON.parse(answer.body)).toEqual(JSON.parse(plain.body));
    },
  );

  it('a request refused before its body is read (401) gets no 100 Continue either', async () => {
    const answer = await withExpect(
      head('/tools/calculator/execute', {
        authorization: 'Bearer not-a-key',
        'content-type': 'application/json',
        'content-length': megabyte.length,
        expect: '100-continue',
      }),
      megabyte,
    );
    expect(answer.status).toBe(401);
    expect(answer.text).not.toContain('100 Continue');
    expect(answer.bodySent).toBe(false);
  });

  it('an acceptable request gets 100 Continue, then its normal answer', async () => {
    const body = Buffer.from('{"expression":"6*7"}');
    const answer = await withExpect(
      head('/tools/calculator/execute', {
        'content-type': 'application/json; charset=utf-8',
        'content-length': body.length,
        expect: '100-continue',
      }),
      body,
    );
    expect(answer.text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
    expect(answer.bodySent).toBe(true);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toMatchObject({ status: 'ok', result: 42 });
  });
});
