import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, checkConfig, loadConfig, parseConfig, sha256 } from './load.js';

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
    // No url, sentinel or cluster: the connection factory uses redis://127.0.0.1:6379.
    expect(config.redis.url).toBeUndefined();
    expect(config.redis.sentinel).toBeUndefined();
    expect(config.redis.cluster).toBeUndefined();
    expect(config.redis.durability).toEqual({ replicas: 0, timeoutMs: 1000 });
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
      limits: { queued: 64, sandboxInFlight: 4, pendingApprovals: 16, sessions: 4 },
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
    [{ redis: { url: 'localhost:6379' } }, '/redis/url'],
    [{ redis: { sentinel: { name: 'm', nodes: ['10.0.0.1'] } } }, '/redis/sentinel/nodes/0'],
    [{ redis: { cluster: { nodes: [] } } }, '/redis/cluster/nodes'],
    [{ redis: { url: 'redis://r:6379', cluster: { nodes: ['r1:7000'] } } }, '/redis/cluster'],
  ])('names the bad field: %j', (doc, field) => {
    expect(() => parseConfig(doc)).toThrow(ConfigError);
    try {
      parseConfig(doc);
    } catch (err) {
      expect((err as ConfigError).field).toBe(field);
      expect((err as ConfigError).message).toContain(field);
    }
  });

  it('takes a sentinel set or a cluster instead of a url, but not both', () => {
    const sentinel = parseConfig({
      redis: {
        sentinel: { name: 'toolgate', nodes: ['s1:26379', '[::1]:26380'], password: 'pw' },
        durability: { replicas: 1 },
      },
    });
    expect(sentinel.redis.sentinel?.nodes).toEqual(['s1:26379', '[::1]:26380']);
    expect(sentinel.redis.durability).toEqual({ replicas: 1, timeoutMs: 1000 });
    // REDIS_URL from the environment conflicts with a cluster in the file: said, not ignored.
    expect(() =>
      parseConfig({ redis: { cluster: { nodes: ['c1:7000'] } } }, { REDIS_URL: 'redis://r:1' }),
    ).toThrow(/set only one of redis.url \(REDIS_URL\), redis.sentinel and redis.cluster/);
    const { problems } = checkConfig({
      redis: { sentinel: { name: 'm', nodes: ['s:1'] }, cluster: { nodes: ['c:1'] } },
    });
    expect(problems).toEqual([
      {
        path: '/redis/cluster',
        message: expect.stringContaining('got sentinel and cluster') as unknown,
      },
    ]);
  });

  it("keeps the egress filter's per-client share within its total", () => {
    expect(parseConfig({}).sandbox.egress).toEqual({
      maxConnections: 256,
      maxConnectionsPerClient: 64,
    });
    const doc = { sandbox: { egress: { maxConnections: 32, maxConnectionsPerClient: 40 } } };
    expect(() => parseConfig(doc)).toThrow(
      '/sandbox/egress/maxConnectionsPerClient: must be at most egress.maxConnections (32), got 40',
    );
    expect(checkConfig(doc).problems).toEqual([
      {
        path: '/sandbox/egress/maxConnectionsPerClient',
        message: 'must be at most egress.maxConnections (32), got 40',
      },
    ]);
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
