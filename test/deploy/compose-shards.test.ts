/**
 * deploy/compose/shards.yml, the three-Redis override of docker-compose.yml, as docker-compose
 * itself merges it (`docker-compose config`: no engine needed, nothing started): three Redis
 * services with a volume each, and gateway and worker reading deploy/toolgate.shards.yaml,
 * which toolgate's own loader takes with the env each container gets. The stack running is
 * compose.test.ts's part (single Redis).
 *
 * Skipped, with the reason printed, only when docker-compose is missing.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ShardMap, loadConfig } from '@toolgate/config';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SHARDS = 'deploy/compose/shards.yml';
const ENV = {
  TOOLGATE_ADMIN_KEY: 'admin-0123456789abcdef',
  TOOLGATE_ASSISTANT_KEY: 'assistant-0123456789abcdef',
  TOOLGATE_DATA_DIR: '/srv/toolgate',
};

const skipReason =
  spawnSync('docker-compose', ['version'], { stdio: 'ignore', timeout: 20_000 }).status === 0
    ? undefined
    : 'docker-compose is not installed (apt-get install -y docker-compose)';
if (skipReason) console.warn(`[test/deploy/compose-shards.test.ts] skipped: ${skipReason}`);

interface Service {
  image?: string;
  environment?: Record<string, string>;
  volumes?: string[];
  depends_on?: Record<string, { condition: string }>;
  networks?: Record<string, { aliases?: string[] } | null>;
  healthcheck?: { test: string[] };
  cap_add?: string[];
}

/** The merged file, as `docker-compose -f docker-compose.yml -f <files> config` prints it. */
function composeConfig(...files: string[]): { services: Record<string, Service> } {
  const out = spawnSync(
    'docker-compose',
    ['-p', 'tgshards', '-f', 'docker-compose.yml', ...files.flatMap((f) => ['-f', f]), 'config'],
    {
      cwd: ROOT,
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', ...ENV },
      timeout: 60_000,
    },
  );
  if (out.status !== 0) throw new Error(`docker-compose config failed: ${out.stderr}`);
  return parseYaml(out.stdout) as { services: Record<string, Service> };
}

/** `source:target[:mode]` of a service's volumes, by target. */
function mounts(service: Service): Map<string, string> {
  return new Map(
    (service.volumes ?? []).map((v) => {
      const [source, target] = v.split(':');
      return [target!, source!];
    }),
  );
}

describe.skipIf(skipReason !== undefined)('docker-compose with deploy/compose/shards.yml', () => {
  it('runs three Redis services, each with its own volume and healthcheck, that the gateway and worker wait for', () => {
    const { services } = composeConfig(SHARDS);
    const redis = Object.keys(services)
      .filter((name) => services[name]!.image === 'toolgate/redis:7')
      .sort();
    expect(redis).toEqual(['redis', 'redis-s1', 'redis-s2']);
    // A volume each: one shard's data (or its loss) is never another's.
    const volumes = redis.map((name) => mounts(services[name]!).get('/data'));
    expect(new Set(volumes).size).toBe(3);
    for (const name of redis)
      expect(services[name]!.healthcheck?.test).toEqual(['CMD', 'redis-cli', 'ping']);
    for (const name of ['gateway', 'worker']) {
      expect(services[name]!.depends_on).toEqual(
        Object.fromEntries(redis.map((r) => [r, { condition: 'service_healthy' }])),
      );
    }
  });

  it('gives gateway and worker a config that toolgate loads with the three shards, each a different Redis service', () => {
    const { services } = composeConfig(SHARDS);
    // The name each Redis answers to on the compose network: its service name and aliases.
    const names = new Map<string, string>();
    for (const [name, service] of Object.entries(services)) {
      if (service.image !== 'toolgate/redis:7') continue;
      names.set(name, name);
      for (const alias of service.networks?.default?.aliases ?? []) names.set(alias, name);
    }
    const placed = new Set<string>();
    for (const name of ['gateway', 'worker']) {
      const service = services[name]!;
      const env = service.environment!;
      // The one config mount, the shards file; nothing names a single Redis any more.
      const file = mounts(service).get(env.TOOLGATE_CONFIG!);
      expect(file).toBe(path.join(ROOT, 'deploy/toolgate.shards.yaml'));
      expect(env.REDIS_URL ?? '').toBe('');
      const config = loadConfig(env, file);
      expect(config.redis.url).toBeUndefined();
      const map = new ShardMap(config);
      expect(map.list.map((s) => [s.id, s.home])).toEqual([
        ['s0', true],
        ['s1', false],
        ['s2', false],
      ]);
      const served = map.list.map((s) => names.get(new URL(s.redis.url!).hostname));
      expect(served).toEqual(['redis', 'redis-s1', 'redis-s2']);
      for (const client of config.clients) placed.add(`${client.id}@${map.of(client.id).id}`);
      // The same host paths as the single-Redis stack's config.
      expect(config.sandbox.workspacesRoot).toBe('/srv/toolgate/workspaces');
    }
    // Gateway and worker agree on every client's shard.
    expect(placed.size).toBe(2);
  });

  it('keeps deploy/toolgate.shards.yaml the same as deploy/toolgate.compose.yaml but for redis', () => {
    const read = (file: string) =>
      parseYaml(readFileSync(path.join(ROOT, file), 'utf8')) as Record<string, unknown>;
    const { redis, ...rest } = read('deploy/toolgate.shards.yaml');
    expect(redis).toBeDefined();
    expect(rest).toEqual(read('deploy/toolgate.compose.yaml'));
  });

  it('composes with warm-workspaces.yml: the shards config stays, the worker gets its mount rights', () => {
    const { services } = composeConfig(SHARDS, 'deploy/compose/warm-workspaces.yml');
    const worker = services.worker!;
    expect(worker.cap_add).toEqual(['SYS_ADMIN']);
    expect(mounts(worker).get('/etc/toolgate/toolgate.yaml')).toBe(
      path.join(ROOT, 'deploy/toolgate.shards.yaml'),
    );
    expect(worker.volumes).toContain('/srv/toolgate:/srv/toolgate:rshared');
  });
});
