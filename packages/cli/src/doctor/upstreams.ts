/**
 * The configured upstreams (docs/upstreams.md): each one's state as the catalog in Redis has
 * it (the process that reads its list writes it: a worker, for a stdio server), and for an
 * `npm:` server, whether the node sandbox image has it at the pinned version.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { createRedis, Keys } from '@toolgate/calls';
import { isStdioUpstream, NPM_SERVERS_DIR, ShardMap, type Config } from '@toolgate/config';
import { dockerAnswers } from '@toolgate/sandbox';
import { request } from 'node:http';
import { fail, ok, skip, warn, type CheckResult } from './check.js';

/** What the catalog hash's `meta` field holds (packages/upstreams/src/catalog.ts). */
interface CatalogMeta {
  checkedAt: number;
  tools: number;
  error?: string;
  /** A stdio upstream's: each worker's server (`Keys.upstream(id).supervisors`, ≤ 30 s old). */
  workers?: { state: string; restarts: number; shared?: boolean }[];
}
/** A supervisor entry older than this is a worker gone (as catalog.ts reads them). */
const SUPERVISOR_STALE_MS = 30_000;

export async function checkUpstreams(
  config: Config,
  ctx: { cwd: string; env: Record<string, string | undefined> },
): Promise<CheckResult[]> {
  if (config.upstreams.length === 0) return [];
  const results: CheckResult[] = [];
  const metas = await readMetas(config);
  for (const u of config.upstreams) {
    const transport = u.url !== undefined ? 'http' : u.npm !== undefined ? `npm ${u.npm}` : 'stdio';
    const name = `upstream ${u.id}`;
    const meta = metas?.get(u.id);
    if (metas === undefined) {
      results.push(skip(name, `${transport}: state unknown (Redis does not answer)`));
    } else if (!meta) {
      results.push(
        warn(
          name,
          `${transport}: unknown, its tools were never read`,
          isStdioUpstream(u)
            ? 'a worker with a sandbox driver reads a stdio server’s tools: start one'
            : 'start a gateway or worker; they read its tools within refreshSeconds',
        ),
      );
    } else {
      const ago = Math.round((Date.now() - meta.checkedAt) / 1000);
      results.push(
        meta.error !== undefined
          ? warn(
              name,
              `${transport}: down (${ago} s ago): ${meta.error}`,
              'the log of the process reading it has the cause; /readyz shows the state',
            )
          : ok(name, `${transport}: up, ${meta.tools} tools (read ${ago} s ago)${workersOf(meta)}`),
      );
    }
    if (u.npm !== undefined) results.push(await npmCheck(config, u.id, u.image, u.npm, ctx.cwd));
  }
  return results;
}

/** Each upstream's catalog meta; undefined when Redis does not answer. */
async function readMetas(config: Config): Promise<Map<string, CatalogMeta> | undefined> {
  // The catalogs are deployment-wide: on the home shard (docs/sharding.md).
  const home = new ShardMap(config).home.redis;
  const redis = createRedis(home, 'command', {
    lazyConnect: true,
    connectTimeout: 3000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    const keys = Keys.for(home);
    const out = new Map<string, CatalogMeta>();
    for (const u of config.upstreams) {
      const text = await redis.hget(keys.upstream(u.id).catalog, 'meta');
      if (!text) continue;
      const meta = JSON.parse(text) as CatalogMeta;
      if (isStdioUpstream(u)) {
        const all = await redis.hgetall(keys.upstream(u.id).supervisors);
        meta.workers = Object.values(all)
          .map(
            (t) => JSON.parse(t) as { state: string; restarts: number; at: number; shared?: true },
          )
          .filter((e) => Date.now() - e.at <= SUPERVISOR_STALE_MS)
          .map(({ state, restarts, shared }) => ({
            state,
            restarts,
            ...(shared ? { shared } : {}),
          }));
      }
      out.set(u.id, meta);
    }
    return out;
  } catch {
    return undefined;
  } finally {
    redis.disconnect();
  }
}

/**
 * `; workers: up (0 restarts), backoff (3 restarts)` for a stdio upstream's supervisors; a worker
 * using its host's shared server says `shared` (the state is that server's).
 */
function workersOf(meta: CatalogMeta): string {
  if (!meta.workers) return '';
  if (meta.workers.length === 0) return '; no worker runs it now';
  return `; workers: ${meta.workers
    .map((w) => `${w.shared ? 'shared ' : ''}${w.state} (${w.restarts} restarts)`)
    .join(', ')}`;
}

/**
 * The node image has `spec` (`<package>@<version>`): the Docker image's `toolgate.npm-servers`
 * label (build-images.sh), else the package in the bwrap root filesystem.
 */
async function npmCheck(
  config: Config,
  id: string,
  imageKey: string,
  spec: string,
  cwd: string,
): Promise<CheckResult> {
  const name = `upstream ${id} npm`;
  const fix = `SANDBOX_NPM_SERVERS='${spec}' bash scripts/sandbox/build-images.sh`;
  const image = config.sandbox.images[imageKey];
  if (!image) return fail(name, `no sandbox image "${imageKey}"`, 'add it to sandbox.images');
  const at = spec.lastIndexOf('@');
  const pkg = spec.slice(0, at);
  const version = spec.slice(at + 1);
  const socket = config.sandbox.docker.socketPath;
  if (config.sandbox.driver !== 'bwrap' && (await dockerAnswers(socket))) {
    const labels = await imageLabels(socket, image.docker);
    if (labels === undefined) return fail(name, `${image.docker} is missing`, fix);
    const servers = (labels['toolgate.npm-servers'] ?? '').split(' ');
    return servers.includes(spec)
      ? ok(name, `${image.docker} has ${spec}`)
      : fail(
          name,
          `${image.docker} does not have ${spec} (it has: ${servers.join(', ') || 'none'})`,
          fix,
        );
  }
  const file = path.join(
    path.resolve(cwd, image.rootfs),
    NPM_SERVERS_DIR,
    'node_modules',
    pkg,
    'package.json',
  );
  const found = await readFile(file, 'utf8')
    .then((t) => (JSON.parse(t) as { version?: string }).version)
    .catch(() => undefined);
  if (found === version) return ok(name, `${image.rootfs} has ${spec}`);
  return fail(
    name,
    found
      ? `${image.rootfs} has ${pkg}@${found}, not ${version}`
      : `${image.rootfs} does not have ${pkg}`,
    fix,
  );
}

/** An image's labels from the Docker socket; undefined when it is not there. */
function imageLabels(socketPath: string, tag: string): Promise<Record<string, string> | undefined> {
  return new Promise((resolve) => {
    const req = request(
      { socketPath, path: `/images/${encodeURIComponent(tag)}/json`, method: 'GET', timeout: 5000 },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          if (res.statusCode !== 200) return resolve(undefined);
          try {
            const body = JSON.parse(text) as { Config?: { Labels?: Record<string, string> } };
            resolve(body.Config?.Labels ?? {});
          } catch {
            resolve(undefined);
          }
        });
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(undefined));
    req.end();
  });
}
