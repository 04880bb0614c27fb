import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Keys, createRedis, type RedisClient } from '@toolgate/calls';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { CredentialRules, type CredentialRule } from './credentials.js';
import { SecretConfigError, SecretError } from './errors.js';
import { KeyRing } from './keyring.js';
import { SecretStore } from './store.js';

let redis: RedisClient;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
});
afterAll(() => redis?.disconnect());

const freshKeys = () => new Keys(`sec${randomUUID().slice(0, 8)}`);

describe('KeyRing', () => {
  it('takes 32 bytes as base64 or hex, from the environment or a file, and refuses anything else', () => {
    const raw = randomBytes(32);
    const dir = mkdtempSync(join(tmpdir(), 'toolgate-keys-'));
    writeFileSync(join(dir, 'hex'), `${raw.toString('hex')}\n`);
    const fromEnv = KeyRing.load({ key: raw.toString('base64') })!;
    const fromFile = KeyRing.load({ keyFile: join(dir, 'hex') })!;
    expect(fromFile.currentId).toBe(fromEnv.currentId);
    expect(fromFile.open(fromEnv.seal('v', 'ctx'), 'ctx')).toBe('v');
    expect(KeyRing.load({})).toBeUndefined();

    for (const bad of ['short', randomBytes(16).toString('base64'), 'z'.repeat(64)]) {
      expect(() => KeyRing.load({ key: bad })).toThrow(SecretConfigError);
    }
    expect(() => KeyRing.load({ key: 'short' })).toThrow(
      /invalid configuration: TOOLGATE_SECRETS_KEY: must be 32 random bytes/,
    );
    expect(() => KeyRing.load({ keyFile: join(dir, 'missing') })).toThrow(
      /\/secrets\/keyFile: cannot read/,
    );
  });

  it('a sealed value opens only with its key and only in its place', () => {
    const ring = KeyRing.of(randomBytes(32));
    const sealed = ring.seal('hunter2', 'a');
    expect(sealed).not.toContain('hunter2');
    expect(() => ring.open(sealed, 'b')).toThrow(SecretError);
    expect(() => KeyRing.of(randomBytes(32)).open(sealed, 'a')).toThrow(/not configured/);
  });
});

describe('SecretStore', () => {
  it("reads a user's own secret first and falls back to the client's", async () => {
    const store = new SecretStore(redis, freshKeys(), KeyRing.of(randomBytes(32)));
    await store.set('acme', 'token', 'client-wide');
    await store.set('acme', 'token', 'just-ann', 'ann@example.com');
    expect(await store.read('acme', 'token', 'ann@example.com')).toBe('just-ann');
    expect(await store.read('acme', 'token', 'bob')).toBe('client-wide');
    expect(await store.read('acme', 'token')).toBe('client-wide');
    expect(await store.read('other', 'token')).toBeUndefined();
    expect((await store.list('acme', 'ann@example.com')).map((s) => s.name)).toEqual(['token']);
  });

  it('a value moved to another client in Redis does not open there', async () => {
    const keys = freshKeys();
    const store = new SecretStore(redis, keys, KeyRing.of(randomBytes(32)));
    await store.set('acme', 'token', 'acme-only');
    const sealed = await redis.hget(keys.secrets('acme').values, 'token');
    await redis.hset(keys.secrets('evil').values, 'token', sealed!);
    await expect(store.read('evil', 'token')).rejects.toMatchObject({
      code: 'secret_unreadable',
    });
  });

  it('rotate re-seals values of the previous key with the current one', async () => {
    const keys = freshKeys();
    const oldKey = randomBytes(32);
    const newKey = randomBytes(32);
    const before = new SecretStore(redis, keys, KeyRing.of(oldKey));
    await before.set('acme', 'a', 'one');
    await before.set('acme', 'b', 'two', 'ann');

    const after = new SecretStore(redis, keys, KeyRing.of(newKey, oldKey));
    expect(await after.read('acme', 'a')).toBe('one'); // still opens before rotation
    expect(await after.rotate()).toEqual({ owners: 2, resealed: 2, unreadable: 0 });
    expect(await after.rotate()).toEqual({ owners: 2, resealed: 0, unreadable: 0 });

    const newOnly = new SecretStore(redis, keys, KeyRing.of(newKey));
    expect(await newOnly.read('acme', 'a')).toBe('one');
    expect(await newOnly.read('acme', 'b', 'ann')).toBe('two');
  });

  it('without a key it lists and deletes but refuses to set or read', async () => {
    const store = new SecretStore(redis, freshKeys(), undefined);
    await expect(store.set('acme', 'a', 'v')).rejects.toMatchObject({ code: 'secrets_disabled' });
    await expect(store.read('acme', 'a')).rejects.toMatchObject({ code: 'secrets_disabled' });
    expect(await store.list('acme')).toEqual([]);
  });
});

/** A request's origin as the http tools and the egress proxy hand it over. */
const https = (host: string, port = 443) => ({ scheme: 'https' as const, host, port });
const http = (host: string, port = 80) => ({ scheme: 'http' as const, host, port });

describe('CredentialRules', () => {
  it('matches hosts exactly or below a *. name, a client rule replacing a shared one', () => {
    const rules = new CredentialRules(
      [
        { host: 'api.github.com', header: 'Authorization', value: 'Bearer ${secret:gh}' },
        { host: '*.corp.example', header: 'X-Key', value: '${secret:corp}' },
      ],
      [
        {
          id: 'a',
          credentials: [
            { host: 'API.github.com', header: 'authorization', value: 'token ${secret:mine}' },
          ],
        },
      ],
    );
    expect(rules.match('b', https('api.github.com')).map((r) => r.parts)).toEqual([
      ['Bearer ', 'gh', ''],
    ]);
    expect(rules.match('a', https('api.github.com')).map((r) => r.parts)).toEqual([
      ['token ', 'mine', ''],
    ]);
    expect(rules.match('b', https('x.corp.example'))).toHaveLength(1);
    expect(rules.match('b', https('corp.example'))).toHaveLength(0);
    expect(rules.match('b', https('github.com'))).toHaveLength(0);
  });

  it('binds a rule to its scheme and port: https and 443 unless it says otherwise', () => {
    const rule = (where: Pick<CredentialRule, 'host' | 'scheme' | 'port'>): CredentialRule => ({
      header: 'X-Key',
      value: '${secret:k}',
      ...where,
    });
    const rules = new CredentialRules(
      [
        rule({ host: 'api.test' }),
        rule({ host: 'plain.test', scheme: 'http' }),
        rule({ host: 'alt.test', port: 8443 }),
        rule({ host: 'http://lan.test:8081/' }),
        rule({ host: 'HTTPS://*.corp.test' }),
        rule({ host: 'https://[::1]:9443' }),
      ],
      [],
    );
    const hits = (origin: { scheme: 'http' | 'https'; host: string; port: number }) =>
      rules.match('c', origin).length;
    // A bare host is https on 443 only: its secret never goes in clear, nor to another port.
    expect(hits(https('api.test'))).toBe(1);
    expect(hits(http('api.test', 8081))).toBe(0);
    expect(hits(http('api.test', 443))).toBe(0);
    expect(hits(https('api.test', 8443))).toBe(0);
    // scheme alone takes that scheme's port.
    expect(hits(http('plain.test'))).toBe(1);
    expect(hits(https('plain.test'))).toBe(0);
    expect(hits(https('alt.test', 8443))).toBe(1);
    expect(hits(https('alt.test'))).toBe(0);
    expect(hits(http('lan.test', 8081))).toBe(1);
    expect(hits(http('lan.test'))).toBe(0);
    expect(hits(https('x.corp.test'))).toBe(1);
    expect(hits(http('x.corp.test'))).toBe(0);
    expect(hits(https('[::1]', 9443))).toBe(1);
  });

  it("a call's headers use its user's secret, else the client's; missing says how to set it", async () => {
    const store = new SecretStore(redis, freshKeys(), KeyRing.of(randomBytes(32)));
    const rules = new CredentialRules(
      [{ host: 'api.example', header: 'Authorization', value: 'Bearer ${secret:tok}' }],
      [],
    );
    await store.set('acme', 'tok', 'client-wide');
    await store.set('acme', 'tok', 'ann-only', 'ann');
    const ann = rules.forCall(store, 'acme', 'ann');
    expect(ann.covers(https('API.example'))).toBe(true);
    expect(ann.covers(https('other.example'))).toBe(false);
    expect(ann.covers(http('api.example', 8081))).toBe(false);
    expect(await ann.headersFor(http('api.example', 8081))).toEqual([]);
    expect(await ann.headersFor(https('api.example'))).toEqual([
      ['authorization', 'Bearer ann-only'],
    ]);
    expect([...ann.used]).toEqual(['ann-only']);
    expect(await rules.forCall(store, 'acme', 'bob').headersFor(https('api.example'))).toEqual([
      ['authorization', 'Bearer client-wide'],
    ]);
    const missing = rules.forCall(store, 'other', 'carl').headersFor(https('api.example'));
    await expect(missing).rejects.toMatchObject({
      code: 'credential_missing',
      message: expect.stringContaining('toolgate secrets set other --user carl tok'),
      details: { secret: 'tok', api: 'PUT /v1/secrets/other/tok?user=carl' },
    });
  });

  it('refuses a rule that names no secret or a bad one, naming the field', () => {
    expect(
      () => new CredentialRules([{ host: 'h.example', header: 'X', value: 'plain' }], []),
    ).toThrow(/\/credentials\/0\/value: names no secret/);
    expect(
      () => new CredentialRules([{ host: 'h.example', header: 'X', value: '${secret:9x}' }], []),
    ).toThrow(/does not name a secret/);
    const bad = (fields: object) => () =>
      new CredentialRules(
        [{ host: 'h.example', header: 'X', value: '${secret:a}', ...fields }],
        [],
      );
    expect(bad({ host: 'h.example:8080' })).toThrow(/\/credentials\/0\/host: .*origin/);
    expect(bad({ host: 'ftp://h.example' })).toThrow(
      '/credentials/0/host: "ftp" is not a scheme credentials go to (http or https)',
    );
    expect(bad({ host: 'https://u@h.example' })).toThrow(/\/credentials\/0\/host: .*no user/);
    expect(bad({ host: 'https://h.example/api' })).toThrow(/\/credentials\/0\/host/);
    expect(bad({ host: 'https://h.example', port: 8443 })).toThrow(
      /\/credentials\/0\/port: the host "https:\/\/h\.example" already states/,
    );
    expect(bad({ host: 'https://h.example', scheme: 'http' })).toThrow(/\/credentials\/0\/scheme/);
    expect(bad({ port: 70000 })).toThrow('/credentials/0/port: 70000 is not a port (1 to 65535)');
    expect(bad({ scheme: 'ws' })).toThrow(/\/credentials\/0\/scheme/);
  });
});
