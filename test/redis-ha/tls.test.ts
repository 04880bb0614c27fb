/**
 * Redis over TLS (`rediss://` with `redis.tls.caFile`): a real redis-server with only a TLS
 * port and a certificate from a CA made here, and a gateway and worker that trust that CA.
 * (A client that does not trust it is not tested here: ioredis listens once for a TLS socket's
 * error, and the server's alert that can follow the failed handshake is then thrown uncaught.)
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/redis-server.js';
import { startStack } from '../support/stack.js';

let dir: string;
let server: ChildProcess;
let port: number;

function openssl(...args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tg-tls-'));
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '1',
    '-subj',
    '/CN=toolgate test CA',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
  );
  openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=localhost',
    '-keyout',
    'redis.key',
    '-out',
    'redis.csr',
  );
  openssl(
    'x509',
    '-req',
    '-in',
    'redis.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '1',
    '-out',
    'redis.pem',
  );
  port = await freePort();
  server = spawn(
    'redis-server',
    [
      '--port',
      '0', // no plain-text port at all
      '--tls-port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--tls-cert-file',
      join(dir, 'redis.pem'),
      '--tls-key-file',
      join(dir, 'redis.key'),
      '--tls-ca-cert-file',
      join(dir, 'ca.pem'),
      '--tls-auth-clients',
      'no',
      '--save',
      '',
      '--appendonly',
      'no',
    ],
    { stdio: 'ignore' },
  );
  await new Promise((r) => setTimeout(r, 300));
});

afterAll(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

describe('Redis over TLS', () => {
  it('a gateway and worker that trust the CA run calls over rediss://', async () => {
    const stack = await startStack({
      config: {
        redis: {
          url: `rediss://127.0.0.1:${port}`,
          tls: { caFile: join(dir, 'ca.pem'), servername: 'localhost' },
          prefix: 'tls',
        },
      },
    });
    try {
      const res = await stack.call('/tools/calculator/execute', { json: { expression: '2+2' } });
      expect(await res.json()).toMatchObject({ status: 'ok', result: 4 });
      expect((await stack.call('/readyz', { key: null })).status).toBe(200);
    } finally {
      await stack.close();
    }
  });
});
