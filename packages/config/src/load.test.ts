import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfig, sha256 } from './load.js';

function file(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-config-'));
  const path = join(dir, 'toolgate.yaml');
  writeFileSync(path, text);
  return path;
}

describe('loadConfig', () => {
  it('gives every field a default', () => {
    const config = loadConfig({});
    expect(config.server.port).toBe(8080);
    expect(config.redis.url).toBe('redis://127.0.0.1:6379');
    expect(config.clients).toEqual([]);
    expect(config.policy.loopGuard).toEqual({ maxCalls: 25, windowSeconds: 300 });
    expect(config.policy.approval).toEqual({ tools: [], ttlSeconds: 900 });
    expect(config.policy.shell.mode).toBe('blocklist');
    expect(config.plugins.dirs).toEqual(['./plugins']);
  });

  it('reads YAML, substitutes ${VAR} and hashes plain keys', () => {
    const path = file(`
clients:
  - id: assistant-a
    key: \${ASSISTANT_A_KEY}
    tools: ["calculator", "category:time"]
    rateLimit: { perMinute: 60 }
  - id: ops
    keySha256: ${'AB'.repeat(32)}
    admin: true
policy:
  approval: { tools: [file_delete], ttlSeconds: 60 }
server:
  port: \${TOOLGATE_TEST_PORT:-9000}
`);
    const config = loadConfig({ TOOLGATE_CONFIG: path, ASSISTANT_A_KEY: 'a-very-long-secret-key' });
    expect(config.clients[0]).toEqual({
      id: 'assistant-a',
      keySha256: sha256('a-very-long-secret-key'),
      tools: ['calculator', 'category:time'],
      rateLimit: { perMinute: 60 },
      limits: { queued: 64, sandboxInFlight: 4 },
      admin: false,
    });
    expect(config.clients[0]).not.toHaveProperty('key');
    expect(config.clients[1]).toMatchObject({
      id: 'ops',
      admin: true,
      keySha256: 'ab'.repeat(32),
      tools: ['*'],
    });
    expect(config.policy.approval.tools).toEqual(['file_delete']);
    expect(config.server.port).toBe(9000);
  });

  it('lets env vars override the important fields', () => {
    const config = loadConfig({
      REDIS_URL: 'redis://r:6380',
      PORT: '9999',
      TOOLGATE_LOG_LEVEL: 'debug',
    });
    expect(config.redis.url).toBe('redis://r:6380');
    expect(config.server.port).toBe(9999);
    expect(config.log.level).toBe('debug');
  });

  it.each([
    [{ server: { port: 'eighty' } }, '/server/port'],
    [{ server: { prot: 1 } }, '/server/prot'],
    [{ clients: [{ id: 'a', key: 'short' }] }, '/clients/0/key'],
    [{ clients: [{ id: 'a' }] }, '/clients/0'],
    [
      {
        clients: [
          { id: 'a', key: 'k'.repeat(20) },
          { id: 'a', key: 'j'.repeat(20) },
        ],
      },
      '/clients/1/id',
    ],
    [{ policy: { shell: { mode: 'yolo' } } }, '/policy/shell/mode'],
    [{ sandbox: 5 }, '/sandbox'],
    [{ worker: { queues: ['slow'] } }, '/worker/queues/0'],
  ])('names the bad field: %j', (doc, field) => {
    expect(() => parseConfig(doc)).toThrow(ConfigError);
    try {
      parseConfig(doc);
    } catch (err) {
      expect((err as ConfigError).field).toBe(field);
      expect((err as ConfigError).message).toContain(field);
    }
  });

  it('names a missing environment variable and a bad override', () => {
    expect(() => parseConfig({ clients: [{ id: 'a', key: '${NOPE_NOT_SET}' }] })).toThrow(
      /\/clients\/0\/key: environment variable NOPE_NOT_SET is not set/,
    );
    expect(() => loadConfig({ PORT: 'abc' })).toThrow(/PORT: must be an integer/);
  });

  it('reports an unreadable or unparsable file', () => {
    expect(() => loadConfig({ TOOLGATE_CONFIG: '/nonexistent/toolgate.yaml' })).toThrow(
      /TOOLGATE_CONFIG: cannot read/,
    );
    expect(() => loadConfig({ TOOLGATE_CONFIG: file('clients: [') })).toThrow(/not valid YAML/);
  });
});
