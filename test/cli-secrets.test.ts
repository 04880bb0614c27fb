/**
 * `toolgate secrets set|list|delete|rotate` as an operator runs them: the real bin as a child
 * process, the value on stdin, against a real gateway and the run's Redis.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Keys, createRedis } from '@toolgate/calls';
import { KeyRing, SecretStore } from '@toolgate/secrets';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ROOT, TOOLGATE_BIN } from './support/process.js';
import { startRedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function toolgate(args: string[], env: Record<string, string>, stdin = ''): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [TOOLGATE_BIN, ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    child.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

const oldKey = randomBytes(32);
const newKey = randomBytes(32);
const VALUE = `cli-${randomBytes(10).toString('hex')}`;
let stack: Stack;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'tg-secrets-'));
  stack = await startStack({ config: { secrets: { key: oldKey.toString('hex') } } });
});
afterAll(async () => {
  await stack?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('toolgate secrets', () => {
  const env = () => ({ TOOLGATE_URL: stack.url, TOOLGATE_KEY: KEYS.admin });

  it('sets from stdin, lists names only, rotates to a new key, deletes', async () => {
    const set = await toolgate(['secrets', 'set', 'alice', 'api_token'], env(), `${VALUE}\n`);
    expect(set).toMatchObject({ code: 0, stdout: 'stored api_token for alice\n' });
    const forUser = await toolgate(
      ['secrets', 'set', 'alice', '--user', 'ann@example.com', 'api_token'],
      env(),
      VALUE,
    );
    expect(forUser.code).toBe(0);

    const list = await toolgate(['secrets', 'list', 'alice'], env());
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^api_token {2}\d{4}-\d\d-\d\dT/);
    expect(list.stdout + list.stderr).not.toContain(VALUE);

    const empty = await toolgate(['secrets', 'set', 'alice', 'x'], env(), '');
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain('no value on standard input');
    const notAdmin = await toolgate(['secrets', 'list', 'alice'], {
      ...env(),
      TOOLGATE_KEY: KEYS.alice,
    });
    expect(notAdmin.code).toBe(1);
    expect(notAdmin.stderr).toContain('403 forbidden');

    // Rotation: the new key current, the old one previous; afterwards the new key alone opens all.
    await writeFile(path.join(dir, 'new.key'), newKey.toString('base64'));
    await writeFile(path.join(dir, 'old.key'), oldKey.toString('hex'));
    const configFile = path.join(dir, 'toolgate.json');
    await writeFile(
      configFile,
      JSON.stringify({
        redis: { url: inject('redisUrl'), prefix: stack.config.redis.prefix },
        secrets: {
          keyFile: path.join(dir, 'new.key'),
          previousKeyFiles: [path.join(dir, 'old.key')],
        },
      }),
    );
    const rotate = await toolgate(['secrets', 'rotate', '--config', configFile], {});
    expect(rotate.stderr).toBe('');
    expect(rotate.code).toBe(0);
    expect(rotate.stdout).toMatch(
      /^re-sealed 2 secret\(s\) of 2 owner\(s\) with key \S+; 0 unreadable/,
    );
    const redis = createRedis(inject('redisUrl'), 'command');
    try {
      const store = new SecretStore(redis, Keys.for(stack.config.redis), KeyRing.of(newKey));
      expect(await store.read('alice', 'api_token')).toBe(VALUE);
      expect(await store.read('alice', 'api_token', 'ann@example.com')).toBe(VALUE);
    } finally {
      redis.disconnect();
    }

    const badKey = await toolgate(['secrets', 'rotate'], {
      REDIS_URL: inject('redisUrl'),
      TOOLGATE_SECRETS_KEY: 'not-a-key',
    });
    expect(badKey.code).toBe(2);
    expect(badKey.stderr).toContain('TOOLGATE_SECRETS_KEY: must be 32 random bytes');

    const del = await toolgate(['secrets', 'delete', 'alice', 'api_token'], env());
    expect(del).toMatchObject({ code: 0, stdout: 'deleted api_token for alice\n' });
    const again = await toolgate(['secrets', 'delete', 'alice', 'api_token'], env());
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('404 not_found');
  }, 90_000);

  it("rotate re-seals every shard's secrets (each client's are on its shard)", async () => {
    const [s0, s1] = await Promise.all([startRedisServer(), startRedisServer()]);
    const prefix = `rot${randomBytes(3).toString('hex')}`;
    const stores = [s0, s1].map((server) => {
      const redis = createRedis(server.url, 'command');
      return { redis, keys: Keys.for({ prefix }) };
    });
    try {
      // Sealed with the old key, as a gateway would have: alice's on s0, bob's on s1.
      await new SecretStore(stores[0]!.redis, stores[0]!.keys, KeyRing.of(oldKey)).set(
        'alice',
        'token',
        'a-value',
      );
      await new SecretStore(stores[1]!.redis, stores[1]!.keys, KeyRing.of(oldKey)).set(
        'bob',
        'token',
        'b-value',
      );
      const configFile = path.join(dir, 'sharded.json');
      await writeFile(
        configFile,
        JSON.stringify({
          redis: {
            prefix,
            shards: [
              { id: 's0', url: s0.url },
              { id: 's1', url: s1.url },
            ],
          },
          secrets: {
            keyFile: path.join(dir, 'new.key'),
            previousKeyFiles: [path.join(dir, 'old.key')],
          },
        }),
      );
      const rotate = await toolgate(['secrets', 'rotate', '--config', configFile], {});
      expect(rotate.stderr).toBe('');
      expect(rotate.code).toBe(0);
      expect(rotate.stdout).toContain('shard s1: re-sealed 1 secret(s) of 1 owner(s)');
      expect(rotate.stdout).toMatch(
        /^re-sealed 2 secret\(s\) of 2 owner\(s\) with key \S+; 0 unreadable/m,
      );
      // The new key alone opens both, each on its own shard.
      expect(
        await new SecretStore(stores[0]!.redis, stores[0]!.keys, KeyRing.of(newKey)).read(
          'alice',
          'token',
        ),
      ).toBe('a-value');
      expect(
        await new SecretStore(stores[1]!.redis, stores[1]!.keys, KeyRing.of(newKey)).read(
          'bob',
          'token',
        ),
      ).toBe('b-value');
    } finally {
      for (const s of stores) s.redis.disconnect();
      await Promise.all([s0.stop(), s1.stop()]);
    }
  });
});
