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
      isolation: 'client',
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

  it('leaves ${secret:NAME} in credential rules to the worker, still expanding ${VAR}', () => {
    const path = file(`
credentials:
  - { host: api.github.com, header: Authorization, value: "Bearer \${secret:github_token}" }
clients:
  - id: a
    keySha256: ${'ab'.repeat(32)}
    credentials:
      - { host: "*.corp.example", header: X-Api-Key, value: "\${KEY_PREFIX}-\${secret:corp.key}" }
`);
    const key = 'ab'.repeat(32);
    const config = loadConfig({
      TOOLGATE_CONFIG: path,
      KEY_PREFIX: 'v2',
      TOOLGATE_SECRETS_KEY: key,
    });
    expect(config.credentials).toEqual([
      { host: 'api.github.com', header: 'Authorization', value: 'Bearer ${secret:github_token}' },
    ]);
    expect(config.clients[0]!.credentials).toEqual([
      { host: '*.corp.example', header: 'X-Api-Key', value: 'v2-${secret:corp.key}' },
    ]);
    expect(config.secrets).toEqual({ key, previousKeyFiles: [] });
  });

  it('refuses credential rules without a secrets key, a bad key and a bad rule, naming the field', () => {
    const rule = { host: 'api.github.com', header: 'Authorization', value: 'Bearer ${secret:gh}' };
    expect(() => parseConfig({ credentials: [rule] })).toThrow(
      'invalid configuration: /secrets/keyFile: credential rules need a secrets key',
    );
    expect(() => parseConfig({ credentials: [rule] }, { TOOLGATE_SECRETS_KEY: 'short' })).toThrow(
      /invalid configuration: TOOLGATE_SECRETS_KEY: must be 32 random bytes/,
    );
    expect(() =>
      parseConfig(
        { credentials: [{ ...rule, value: 'Bearer hardcoded' }] },
        { TOOLGATE_SECRETS_KEY: 'a'.repeat(64) },
      ),
    ).toThrow('invalid configuration: /credentials/0/value: names no secret');
    expect(
      checkConfig({ secrets: { keyFile: '/nonexistent/key' } }).problems.map((p) => p.path),
    ).toEqual(['/secrets/keyFile']);
    expect(
      parseConfig({ credentials: [rule] }, { TOOLGATE_SECRETS_KEY: 'a'.repeat(64) }).credentials,
    ).toEqual([rule]);
  });

  it('takes a rule bound to a scheme and port, as fields or as an origin, and refuses both at once', () => {
    const env = { TOOLGATE_SECRETS_KEY: 'a'.repeat(64) };
    const rule = { header: 'X-Key', value: '${secret:k}' };
    const rules = [
      { ...rule, host: 'api.test' },
      { ...rule, host: 'lan.test', scheme: 'http', port: 8081 },
      { ...rule, host: 'https://alt.test:8443' },
    ];
    expect(parseConfig({ credentials: rules }, env).credentials).toEqual(rules);
    expect(() =>
      parseConfig({ credentials: [{ ...rule, host: 'a.test', scheme: 'ftp' }] }, env),
    ).toThrow(/invalid configuration: \/credentials\/0\/scheme: must be equal to one of/);
    expect(() => parseConfig({ credentials: [{ ...rule, host: 'a.test', port: 0 }] }, env)).toThrow(
      /invalid configuration: \/credentials\/0\/port: must be >= 1/,
    );
    expect(() =>
      parseConfig({ credentials: [{ ...rule, host: 'http://a.test:81', port: 82 }] }, env),
    ).toThrow(
      'invalid configuration: /credentials/0/port: the host "http://a.test:81" already states the scheme and port; leave out port',
    );
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

  it('takes auth.oauth, token-only clients, and reports what would lock everyone out', () => {
    const oauth = {
      issuer: 'https://login.example.com/realms/x',
      audience: 'https://tg.example/mcp',
    };
    const config = parseConfig({
      clients: [{ id: 'assistant', tools: ['*'] }],
      auth: { oauth: { ...oauth, scopes: { 'tools:files': ['file_*'] } } },
    });
    expect(config.auth).toMatchObject({
      apiKeys: true,
      oauth: { userClaim: 'sub', clockSkewSeconds: 30, scopes: { 'tools:files': ['file_*'] } },
    });
    expect(config.auth.oauth?.algorithms).not.toContain('HS256');
    expect(config.clients[0]!.keySha256).toBeUndefined();
    // Without auth.oauth a client still needs a key.
    expect(checkConfig({ clients: [{ id: 'assistant' }] }).problems).toEqual([
      {
        path: '/clients/0',
        message: expect.stringContaining(
          'or auth.oauth, for a client signing in with tokens only',
        ) as unknown,
      },
    ]);
    expect(
      checkConfig({ clients: [{ id: 'a', key: 'k'.repeat(16) }], auth: { apiKeys: false } })
        .problems,
    ).toEqual([
      {
        path: '/auth/apiKeys',
        message: 'with apiKeys false, auth.oauth must be set (nobody could sign in)',
      },
    ]);
    expect(
      checkConfig({
        auth: {
          oauth: { issuer: 'http://as.example', audience: oauth.audience, algorithms: ['HS256'] },
        },
      }).problems.map((p) => p.path),
    ).toEqual(['/auth/oauth/algorithms/0', '/auth/oauth', '/auth/oauth/issuer']);
    // An audience that is not a URL (Entra ID v2: an application id) needs toolgate's URL apart.
    const entra = { issuer: oauth.issuer, audience: '7f3c0e2a-1111-2222-3333-444455556666' };
    const clients = [{ id: 'a', key: 'k'.repeat(16) }];
    expect(checkConfig({ clients, auth: { oauth: entra } }).problems).toEqual([
      {
        path: '/auth/oauth/audience',
        message: expect.stringContaining('set auth.oauth.resource') as unknown,
      },
    ]);
    expect(
      checkConfig({ clients, auth: { oauth: { ...entra, resource: 'https://tg.example/mcp' } } })
        .problems,
    ).toEqual([]);
  });

  it('names a missing environment variable and a bad override', () => {
    expect(() => parseConfig({ clients: [{ id: 'a', key: '${NOPE_NOT_SET}' }] })).toThrow(
      /\/clients\/0\/key: environment variable NOPE_NOT_SET is not set/,
    );
    expect(() => loadConfig({ PORT: 'abc' })).toThrow(/PORT: must be an integer/);
  });

  it('reads per-user limits and isolation, and names bad ones', () => {
    const [c] = parseConfig({
      clients: [
        {
          id: 'a',
          key: 'a-very-long-secret-key',
          isolation: 'user',
          limits: { perUser: { rateLimit: { perMinute: 60 }, queued: 8, sandboxInFlight: 1 } },
        },
      ],
    }).clients;
    expect(c).toMatchObject({
      isolation: 'user',
      limits: {
        queued: 64,
        perUser: { rateLimit: { perMinute: 60 }, queued: 8, sandboxInFlight: 1 },
      },
    });
    expect(() =>
      parseConfig({
        clients: [{ id: 'a', key: 'a-very-long-secret-key', limits: { perUser: { queued: 0 } } }],
      }),
    ).toThrow(/\/clients\/0\/limits\/perUser\/queued/);
    expect(() =>
      parseConfig({ clients: [{ id: 'a', key: 'a-very-long-secret-key', isolation: 'person' }] }),
    ).toThrow(/\/clients\/0\/isolation/);
  });

  it('refuses upstream ids whose tool names a pattern would read as another tool', () => {
    const key = 'a-very-long-secret-key';
    const up = (id: string) => ({ id, url: 'https://mcp.example/mcp' });
    const fails = (doc: Record<string, unknown>, field: string, text: RegExp) => {
      let error: unknown;
      try {
        parseConfig(doc);
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).field).toBe(field);
      expect((error as ConfigError).message).toMatch(text);
      expect(checkConfig(doc).problems).toEqual([
        { path: field, message: expect.stringMatching(text) as unknown },
      ]);
    };
    // `gh__*` is upstream gh's; an upstream gh__admin's tools would be granted by it too.
    fails({ upstreams: [up('gh'), up('gh__admin')] }, '/upstreams/1/id', /holds "__"/);
    fails({ upstreams: [up('gh_')] }, '/upstreams/0/id', /ends in "_"/);
    fails({ upstreams: [up('gh._')] }, '/upstreams/0/id', /as "gh__" in tool names/);
    fails(
      { upstreams: [up('a.b'), up('a_b')] },
      '/upstreams/1/id',
      /both name their tools "a_b__…"/,
    );
    // `file_*` (file_read, file_write) would grant upstream file's file__delete_everything.
    fails(
      { clients: [{ id: 'a', key, tools: ['file_*'] }], upstreams: [up('file')] },
      '/upstreams/0/id',
      /the pattern "file_\*" \(\/clients\/0\/tools\/0\) would also grant all of its tools \(file__…\)/,
    );
    fails(
      {
        clients: [{ id: 'a', tools: ['*'] }],
        auth: {
          oauth: {
            issuer: 'https://as.example',
            audience: 'https://tg.example/mcp',
            scopes: { 'gh/all': ['g*'] },
          },
        },
        upstreams: [up('gh')],
      },
      '/upstreams/0/id',
      /"g\*" \(\/auth\/oauth\/scopes\/gh~1all\/0\)/,
    );
    // A pattern that names the upstream, or a part of its tools, is what it says.
    const ok = parseConfig({
      clients: [{ id: 'a', key, tools: ['file__*', 'gh__create_*', 'category:file', 'file_read'] }],
      upstreams: [up('file'), up('gh'), up('github')],
    });
    expect(ok.upstreams.map((u) => u.id)).toEqual(['file', 'gh', 'github']);
  });

  it('reads adminScope and tokensWithoutUser, which must name clients', () => {
    const oauth = { issuer: 'https://as.example', audience: 'https://tg.example/mcp' };
    const config = parseConfig({ clients: [{ id: 'ci' }], auth: { oauth } });
    expect(config.auth.oauth).toMatchObject({
      adminScope: 'toolgate:admin',
      tokensWithoutUser: [],
    });
    expect(
      parseConfig({
        clients: [{ id: 'ci' }],
        auth: { oauth: { ...oauth, adminScope: 'ops', tokensWithoutUser: ['ci'] } },
      }).auth.oauth,
    ).toMatchObject({ adminScope: 'ops', tokensWithoutUser: ['ci'] });
    expect(() =>
      parseConfig({
        clients: [{ id: 'ci' }],
        auth: { oauth: { ...oauth, tokensWithoutUser: ['cj'] } },
      }),
    ).toThrow('/auth/oauth/tokensWithoutUser/0: no client "cj"');
    expect(() =>
      parseConfig({
        clients: [{ id: 'ci' }],
        auth: { oauth: { ...oauth, adminScope: 'two words' } },
      }),
    ).toThrow(/\/auth\/oauth\/adminScope/);
  });

  it('reports an unreadable or unparsable file', () => {
    expect(() => loadConfig({ TOOLGATE_CONFIG: '/nonexistent/toolgate.yaml' })).toThrow(
      /TOOLGATE_CONFIG: cannot read/,
    );
    expect(() => loadConfig({ TOOLGATE_CONFIG: file('clients: [') })).toThrow(/not valid YAML/);
  });
});

describe('policy.cedar', () => {
  it('is off by default; its paths are relative to the configuration file', () => {
    expect(loadConfig({}).policy.cedar).toBeUndefined();
    const path = file(
      'policy:\n  cedar: { policies: ./policies, schema: cedar/toolgate.cedarschema }\n',
    );
    const cedar = loadConfig({ TOOLGATE_CONFIG: path }).policy.cedar;
    const dir = path.slice(0, path.lastIndexOf('/'));
    expect(cedar).toEqual({
      policies: `${dir}/policies`,
      schema: `${dir}/cedar/toolgate.cedarschema`,
      groupsClaim: 'groups',
      destructiveApproval: 'always',
    });
  });
});
