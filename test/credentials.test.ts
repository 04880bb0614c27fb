/**
 * The secret store and credential injection for http_get/http_post (docs/credentials.md),
 * through a real gateway and worker on a real Redis: the admin API seals values that no route
 * returns, and a rule's header reaches the origin it names — that host, scheme and port only —
 * while the value stays out of the result, the call record, the audit log and the worker's log.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { Writable } from 'node:stream';
import { createRedis, type RedisClient } from '@toolgate/calls';
import { createLogger } from '@toolgate/log';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { startStack, type Stack } from './support/stack.js';

const KEYS = {
  alice: 'alice-key-0123456789abcdef',
  carol: 'carol-key-0123456789abcdef',
  admin: 'admin-key-0123456789abcdef',
};
/** What the tests store: a value shaped like nothing the text redaction rules know. */
const VALUE = `tgs-${randomBytes(12).toString('hex')}`;

interface Echo {
  server: Server;
  port: number;
  seen: IncomingHttpHeaders[];
}

/** A loopback server that records each request's headers and echoes them in its body. */
async function echoServer(redirectTo?: () => string): Promise<Echo> {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    if (redirectTo && req.url === '/redirect') {
      res.writeHead(302, { location: redirectTo() }).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ headers: req.headers }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, seen };
}

let stack: Stack;
let ruled: Echo;
let plain: Echo;
let redis: RedisClient;
const logLines: string[] = [];

beforeAll(async () => {
  plain = await echoServer();
  // Named `localhost` in URLs (the rule's host); redirects to the plain server by address.
  ruled = await echoServer(() => `http://127.0.0.1:${plain.port}/after-redirect`);
  // Everything the gateway and worker log, kept to search for the value afterwards.
  const logger = createLogger(
    'test',
    { level: 'debug' },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        logLines.push(chunk.toString());
        done();
      },
    }),
  );
  stack = await startStack({
    logger,
    config: {
      clients: [
        { id: 'alice', key: KEYS.alice, tools: ['*'] },
        {
          id: 'carol',
          key: KEYS.carol,
          tools: ['*'],
          credentials: [
            // Replaces the shared rule's Authorization for carol (the same origin, as fields).
            {
              host: 'localhost',
              scheme: 'http',
              port: ruled.port,
              header: 'authorization',
              value: 'Token ${secret:never_set}',
            },
          ],
        },
        { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true },
      ],
      credentials: [
        {
          host: `http://localhost:${ruled.port}`,
          header: 'Authorization',
          value: 'Bearer ${secret:svc_token}',
        },
        // The host's HTTPS API (https, 443): never sent to its plain http ports.
        { host: 'localhost', header: 'X-Api-Key', value: '${secret:svc_token}' },
      ],
      secrets: { key: randomBytes(32).toString('base64') },
      policy: {
        http: {
          allowHosts: [
            `localhost:${ruled.port}`,
            `127.0.0.1:${plain.port}`,
            `localhost:${plain.port}`,
          ],
        },
      },
    },
  });
  redis = createRedis(inject('redisUrl'), 'command');
});

afterAll(async () => {
  await stack?.close();
  ruled?.server.close();
  plain?.server.close();
  redis?.disconnect();
});

const admin = (path: string, init: RequestInit & { json?: unknown } = {}) =>
  stack.call(path, { key: KEYS.admin, ...init });

const execute = async (tool: string, args: unknown, key = KEYS.alice) => {
  const res = await stack.call(`/tools/${tool}/execute`, { key, json: args });
  return { status: res.status, text: await res.text() };
};

/** Audit entries are written in batches just after the answer: wait for `ok`. */
async function eventually<T>(read: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  let value = await read();
  for (let i = 0; i < 100 && !ok(value); i++) {
    await new Promise((r) => setTimeout(r, 20));
    value = await read();
  }
  return value;
}

describe('the secret store (admin API)', () => {
  it('seals a value that no route returns and Redis does not hold in clear', async () => {
    const put = await admin('/v1/secrets/alice/svc_token', {
      method: 'PUT',
      json: { value: VALUE },
    });
    expect(put.status).toBe(201);
    const putText = await put.text();
    expect(putText).not.toContain(VALUE);
    expect(JSON.parse(putText)).toMatchObject({ client: 'alice', name: 'svc_token' });

    const again = await admin('/v1/secrets/alice/svc_token', {
      method: 'PUT',
      json: { value: VALUE },
    });
    expect(again.status).toBe(200);

    const list = await admin('/v1/secrets/alice');
    const listText = await list.text();
    expect(list.status).toBe(200);
    expect(listText).not.toContain(VALUE);
    const body = JSON.parse(listText) as { secrets: { name: string; updatedAt: string }[] };
    expect(body.secrets.map((s) => s.name)).toEqual(['svc_token']);
    expect(Object.keys(body.secrets[0]!).sort()).toEqual(['name', 'updatedAt']);

    // At rest: every key of this stack's prefix, dumped, holds no trace of the value.
    const prefix = stack.config.redis.prefix;
    const names = await redis.keys(`${prefix}:secret*`);
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) {
      const type = await redis.type(name);
      const dump =
        type === 'hash'
          ? JSON.stringify(await redis.hgetall(name))
          : type === 'zset'
            ? JSON.stringify(await redis.zrange(name, 0, -1))
            : JSON.stringify(await redis.smembers(name));
      expect(dump).not.toContain(VALUE);
    }
  });

  it('refuses bad names, values over 16 KiB, non-admins and unknown clients with stable codes', async () => {
    const code = async (res: Response) =>
      [res.status, ((await res.json()) as { error: { code: string } }).error.code] as const;
    expect(
      await code(
        await admin('/v1/secrets/alice/9bad name', { method: 'PUT', json: { value: 'x' } }),
      ),
    ).toEqual([400, 'invalid_secret_name']);
    expect(
      await code(
        await admin('/v1/secrets/alice/big', {
          method: 'PUT',
          json: { value: 'x'.repeat(16 * 1024 + 1) },
        }),
      ),
    ).toEqual([400, 'invalid_secret_value']);
    expect(
      await code(await admin('/v1/secrets/alice/empty', { method: 'PUT', json: { value: '' } })),
    ).toEqual([400, 'invalid_secret_value']);
    expect(
      await code(await admin('/v1/secrets/nobody/x', { method: 'PUT', json: { value: 'x' } })),
    ).toEqual([404, 'not_found']);
    expect(await code(await stack.call('/v1/secrets/alice', { key: KEYS.alice }))).toEqual([
      403,
      'forbidden',
    ]);
  });

  it('holds at most 256 secrets per client, and a replaced one does not count twice', async () => {
    for (let i = 0; i < 256; i++) {
      const res = await admin(`/v1/secrets/carol/s${i}`, {
        method: 'PUT',
        json: { value: `v${i}` },
      });
      expect(res.status).toBe(201);
    }
    const over = await admin('/v1/secrets/carol/one_more', { method: 'PUT', json: { value: 'v' } });
    expect(over.status).toBe(409);
    expect(((await over.json()) as { error: { code: string } }).error.code).toBe(
      'too_many_secrets',
    );
    expect(
      (await admin('/v1/secrets/carol/s7', { method: 'PUT', json: { value: 'w' } })).status,
    ).toBe(200);
    for (let i = 0; i < 256; i++) {
      expect((await admin(`/v1/secrets/carol/s${i}`, { method: 'DELETE' })).status).toBe(204);
    }
    expect((await admin('/v1/secrets/carol/s0', { method: 'DELETE' })).status).toBe(404);
  });
});

describe('credential injection into http_get and http_post', () => {
  it('sends the header to the host with a rule, and the value appears nowhere a client or operator reads', async () => {
    const before = ruled.seen.length;
    const { status, text } = await execute('http_get', {
      url: `http://localhost:${ruled.port}/data`,
    });
    expect(status).toBe(200);
    expect(ruled.seen[before]?.authorization).toBe(`Bearer ${VALUE}`);
    // The server echoed the header back: the result has it redacted.
    expect(text).not.toContain(VALUE);
    const outcome = JSON.parse(text) as { id: string; status: string; result: { body: string } };
    expect(outcome.status).toBe('ok');
    expect(JSON.parse(outcome.result.body).headers.authorization).toBe('Bearer [redacted]');

    const record = await stack.call(`/v1/calls/${outcome.id}`);
    expect(await record.text()).not.toContain(VALUE);
    const audit = await eventually(
      async () => (await admin(`/v1/audit?callId=${outcome.id}`)).text(),
      (t) => t.includes(outcome.id),
    );
    expect(audit).toContain(outcome.id);
    expect(audit).not.toContain(VALUE);

    // http_post the same; and the cache never serves another user's credentialed answer.
    const post = await execute('http_post', {
      url: `http://localhost:${ruled.port}/data`,
      body: '{"a":1}',
    });
    expect(post.text).not.toContain(VALUE);
    expect(ruled.seen.at(-1)?.authorization).toBe(`Bearer ${VALUE}`);
    const repeat = JSON.parse(
      (await execute('http_get', { url: `http://localhost:${ruled.port}/data` })).text,
    ) as { cached: boolean };
    expect(repeat.cached).toBe(false);

    expect(logLines.length).toBeGreaterThan(0);
    expect(logLines.join('')).not.toContain(VALUE);
  });

  it('a rule header replaces one the model sent of the same name', async () => {
    await execute('http_get', {
      url: `http://localhost:${ruled.port}/data`,
      headers: { Authorization: 'Bearer model-made-this-up' },
    });
    expect(ruled.seen.at(-1)?.authorization).toBe(`Bearer ${VALUE}`);
  });

  it('a host without a rule gets no header, also when a redirect leads there', async () => {
    const before = plain.seen.length;
    const direct = await execute('http_get', { url: `http://127.0.0.1:${plain.port}/x` });
    expect(direct.status).toBe(200);
    expect(plain.seen[before]?.authorization).toBeUndefined();

    const redirected = await execute('http_get', {
      url: `http://localhost:${ruled.port}/redirect`,
    });
    expect(JSON.parse(redirected.text).result.redirects).toBe(1);
    expect(ruled.seen.at(-1)?.authorization).toBe(`Bearer ${VALUE}`);
    expect(plain.seen.at(-1)?.authorization).toBeUndefined();
  });

  it("a rule binds its scheme and port: the host's HTTPS rule and another port's give nothing here", async () => {
    const before = ruled.seen.length;
    expect((await execute('http_get', { url: `http://localhost:${ruled.port}/data` })).status).toBe(
      200,
    );
    expect(ruled.seen.length).toBe(before + 1);
    expect(ruled.seen.at(-1)?.authorization).toBe(`Bearer ${VALUE}`);
    // `host: localhost` means https://localhost:443: plain http to a port of it gets nothing.
    expect(ruled.seen.at(-1)?.['x-api-key']).toBeUndefined();

    // The same name on another port: no rule names it, nothing is sent.
    const other = await execute('http_get', { url: `http://localhost:${plain.port}/other` });
    expect(other.status).toBe(200);
    expect(plain.seen.at(-1)?.authorization).toBeUndefined();
    expect(plain.seen.at(-1)?.['x-api-key']).toBeUndefined();
  });

  it('a rule naming a secret that is not set fails with credential_missing and how to set it', async () => {
    const before = ruled.seen.length;
    const { text } = await execute(
      'http_get',
      { url: `http://localhost:${ruled.port}/data` },
      KEYS.carol,
    );
    const outcome = JSON.parse(text) as {
      status: string;
      error: { code: string; message: string; details: Record<string, unknown> };
    };
    expect(outcome.status).toBe('error');
    expect(outcome.error.code).toBe('credential_missing');
    expect(outcome.error.message).toContain('"never_set"');
    expect(outcome.error.message).toContain('toolgate secrets set carol never_set');
    expect(outcome.error.message).toContain('PUT /v1/secrets/carol/never_set');
    // Carol's own rule fails before anything is sent: the host never sees a half-set request.
    expect(ruled.seen.length).toBe(before);
  });

  it('audits set and delete by name, never by value', async () => {
    await admin('/v1/secrets/alice/short_lived', { method: 'PUT', json: { value: VALUE } });
    expect((await admin('/v1/secrets/alice/short_lived', { method: 'DELETE' })).status).toBe(204);
    const entries = await eventually(
      async () =>
        (await (await admin('/v1/audit?event=secret&client=alice')).json()) as {
          secret: string;
          status: string;
          by: string;
        }[],
      (e) => e.some((x) => x.secret === 'short_lived' && x.status === 'deleted'),
    );
    const mine = entries.filter((e) => e.secret === 'short_lived');
    expect(mine.map((e) => e.status).sort()).toEqual(['deleted', 'set']);
    expect(mine.every((e) => e.by === 'ops')).toBe(true);
    expect(JSON.stringify(entries)).not.toContain(VALUE);
  });
});
