/**
 * The sandbox side of a worker host: a driver that answers, the images it runs (present, and
 * built from the current sources), cgroups, the warm pool's slots mount, free disk.
 */
import { access, constants, readFile, statfs } from 'node:fs/promises';
import { request } from 'node:http';
import path from 'node:path';
import type { Config } from '@toolgate/config';
import { BwrapDriver, dockerAnswers, mountTable, type DriverName } from '@toolgate/sandbox';
import { fail, ok, skip, warn, type CheckResult } from './check.js';
import { expectedImageHash } from './image-hash.js';

const GB = 1024 ** 3;
const LOW_DISK = 5 * GB;
const BUILD = 'bash scripts/sandbox/build-images.sh';

export interface SandboxContext {
  /** Where relative paths of the config (rootfs, seccomp filter) are resolved: the worker's cwd. */
  cwd: string;
  /** deploy/sandbox of a checkout, when there is one (for "current"). */
  sandboxSources?: string;
  env: Record<string, string | undefined>;
}

/** GET on the Docker socket: status and JSON body. */
function dockerGet(socketPath: string, url: string): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path: url, method: 'GET', timeout: 5000 }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => {
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // plain text answer
        }
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

async function exists(p: string): Promise<boolean> {
  return access(p).then(
    () => true,
    () => false,
  );
}

/** The nearest existing directory at or above `p` (a root that is not made yet). */
async function nearestExisting(p: string): Promise<string> {
  let dir = path.resolve(p);
  while (!(await exists(dir)) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return dir;
}

async function diskCheck(name: string, dir: string, what: string): Promise<CheckResult> {
  const at = await nearestExisting(dir);
  try {
    const s = await statfs(at);
    const free = s.bavail * s.bsize;
    const text = `${(free / GB).toFixed(1)} GB free at ${at} (${what})`;
    return free < LOW_DISK
      ? warn(name, text, `free some space there (under 5 GB, ${what} may fill the disk)`)
      : ok(name, text);
  } catch (err) {
    return warn(
      name,
      `cannot read free space at ${at}: ${(err as Error).message}`,
      'check the path exists on this host',
    );
  }
}

export async function checkSandbox(config: Config, ctx: SandboxContext): Promise<CheckResult[]> {
  const sandbox = config.sandbox;
  if (!config.worker.queues.includes('sandbox')) {
    return [
      skip('sandbox', 'worker.queues has no "sandbox": these workers start no sandbox driver'),
    ];
  }
  if (ctx.env.TOOLGATE_SANDBOX === 'off') {
    return [skip('sandbox', 'TOOLGATE_SANDBOX=off')];
  }
  const results: CheckResult[] = [];
  const socket = sandbox.docker.socketPath;

  // 1. The driver.
  let driver: DriverName | undefined;
  const docker = sandbox.driver !== 'bwrap' && (await dockerAnswers(socket));
  if (docker) {
    driver = 'docker';
    const version = await dockerGet(socket, '/version').catch(() => undefined);
    const v = (version?.body as { Version?: string } | undefined)?.Version;
    results.push(ok('sandbox driver', `docker${v ? ` ${v}` : ''} answers on ${socket}`));
  } else if (sandbox.driver === 'docker') {
    results.push(
      fail(
        'sandbox driver',
        `sandbox.driver is docker and nothing answers on ${socket}`,
        'start the Docker engine (bash scripts/sandbox/ensure-docker.sh), or set sandbox.driver: bwrap',
      ),
    );
  } else if (await BwrapDriver.available()) {
    driver = 'bwrap';
    results.push(
      ok(
        'sandbox driver',
        `bwrap${sandbox.driver === 'auto' ? ` (Docker does not answer on ${socket})` : ''}`,
      ),
    );
  } else {
    results.push(
      fail(
        'sandbox driver',
        sandbox.driver === 'bwrap'
          ? 'bwrap is missing or cannot create namespaces'
          : `no driver: Docker does not answer on ${socket} and bwrap is unavailable`,
        'install bubblewrap (apt-get install bubblewrap) and allow user namespaces, or start Docker',
      ),
    );
  }
  if (!driver) return results;

  // 2. Images, present and built from the current sources.
  for (const [name, image] of Object.entries(sandbox.images)) {
    const expected =
      ctx.sandboxSources && image.docker === `toolgate/sandbox-${name}:local`
        ? await expectedImageHash(
            ctx.sandboxSources,
            name,
            ctx.env.SANDBOX_SUITE || undefined,
            ctx.env,
          )
        : undefined;
    if (driver === 'docker') {
      const res = await dockerGet(socket, `/images/${encodeURIComponent(image.docker)}/json`);
      if (res.status === 404) {
        results.push(
          fail(
            `image ${name}`,
            `${image.docker} is missing (sandbox.images.${name}.docker)`,
            BUILD,
          ),
        );
        continue;
      }
      const label = (res.body as { Config?: { Labels?: Record<string, string> } }).Config?.Labels?.[
        'toolgate.hash'
      ];
      if (expected && label !== expected) {
        results.push(
          warn(
            `image ${name}`,
            `${image.docker} is stale: built from older deploy/sandbox/${name} (hash ${label ?? 'none'}, sources ${expected})`,
            BUILD,
          ),
        );
      } else {
        results.push(ok(`image ${name}`, `${image.docker}${expected ? ' (current)' : ''}`));
      }
    } else {
      const rootfs = path.resolve(ctx.cwd, image.rootfs);
      if (!(await exists(path.join(rootfs, 'bin')))) {
        results.push(
          fail(
            `image ${name}`,
            `root filesystem ${rootfs} is missing (sandbox.images.${name}.rootfs)`,
            BUILD,
          ),
        );
        continue;
      }
      const stamp = (await readFile(`${rootfs}.hash`, 'utf8').catch(() => ''))
        .split(' ')[0]
        ?.trim();
      if (expected && stamp !== expected) {
        results.push(
          warn(
            `image ${name}`,
            `root filesystem ${rootfs} is stale (from ${stamp || 'unknown'}, sources ${expected})`,
            BUILD,
          ),
        );
      } else {
        results.push(ok(`image ${name}`, `${rootfs}${expected ? ' (current)' : ''}`));
      }
    }
  }
  if (driver === 'bwrap' && sandbox.bwrap.seccomp) {
    const filter = path.resolve(ctx.cwd, sandbox.bwrap.seccompFilter);
    results.push(
      (await exists(filter))
        ? ok('seccomp filter', filter)
        : fail('seccomp filter', `${filter} is missing (sandbox.bwrap.seccompFilter)`, BUILD),
    );
  }

  // 3. cgroups: Docker manages its own; bwrap needs a writable hierarchy for memory/pids/cpu.
  results.push(await cgroupCheck(driver, socket));

  // 4. The warm pool's slots mount (docker only, docs/workspaces.md).
  if (driver === 'docker') results.push(await slotsCheck(sandbox.stateDir));

  // 5. Free disk where workspaces and Docker's images live.
  results.push(
    await diskCheck('disk workspaces', sandbox.workspacesRoot, 'sandbox.workspacesRoot'),
  );
  if (driver === 'docker') {
    const info = await dockerGet(socket, '/info').catch(() => undefined);
    const root = (info?.body as { DockerRootDir?: string } | undefined)?.DockerRootDir;
    if (root && (await exists(root)))
      results.push(await diskCheck('disk docker', root, "Docker's images and containers"));
    // 6. Sandboxes of deployments that are gone (a compose project taken down, a dead worker).
    results.push(await leftoversCheck(socket));
  }
  return results;
}

/** Sandbox containers of gone deployments on this engine; `toolgate sandbox prune` removes them. */
async function leftoversCheck(socket: string): Promise<CheckResult> {
  const name = 'sandbox leftovers';
  try {
    const { dockerEngine, findLeftovers } = await import('@toolgate/sandbox/docker');
    const leftovers = await findLeftovers(dockerEngine(socket));
    if (leftovers.length === 0) return ok(name, 'none: every sandbox container has a live worker');
    const byReason = new Map<string, number>();
    for (const l of leftovers) byReason.set(l.reason, (byReason.get(l.reason) ?? 0) + 1);
    const reasons = [...byReason].map(([reason, n]) => `${n} × ${reason}`).join('; ');
    return warn(
      name,
      `${leftovers.length} sandbox container${leftovers.length === 1 ? '' : 's'} of gone deployments: ${reasons}`,
      'toolgate sandbox prune (lists them first with --dry-run)',
    );
  } catch (err) {
    return warn(name, `cannot list containers: ${(err as Error).message}`, 'check `docker ps -a`');
  }
}

async function cgroupCheck(driver: DriverName, socket: string): Promise<CheckResult> {
  const v2 = await readFile('/sys/fs/cgroup/cgroup.controllers', 'utf8').catch(() => undefined);
  const version = v2 !== undefined ? 'v2' : (await exists('/sys/fs/cgroup/memory')) ? 'v1' : 'none';
  if (driver === 'docker') {
    const info = await dockerGet(socket, '/info').catch(() => undefined);
    const body = info?.body as { CgroupVersion?: string; CgroupDriver?: string } | undefined;
    return body?.CgroupVersion
      ? ok(
          'cgroups',
          `v${body.CgroupVersion} (${body.CgroupDriver ?? 'unknown'} driver), managed by Docker`,
        )
      : warn(
          'cgroups',
          `the engine does not report its cgroups (host: ${version})`,
          'check `docker info` for cgroup warnings',
        );
  }
  const root = process.getuid?.() === 0;
  const missing =
    v2 !== undefined ? ['memory', 'pids', 'cpu'].filter((c) => !v2.split(/\s+/).includes(c)) : [];
  const writable = await access('/sys/fs/cgroup', constants.W_OK).then(
    () => true,
    () => false,
  );
  if (version === 'none' || !root || !writable || missing.length > 0) {
    const why =
      version === 'none'
        ? 'no cgroup hierarchy'
        : !root
          ? 'the worker is not root'
          : !writable
            ? '/sys/fs/cgroup is read-only'
            : `controllers missing: ${missing.join(', ')}`;
    return warn(
      'cgroups',
      `${version}, unusable for bwrap (${why}): calls get rlimits only, with no memory limit on the whole call and no OOM report`,
      'run the worker as root with a writable cgroup v2 (memory, pids, cpu delegated)',
    );
  }
  return ok('cgroups', `${version}, writable (memory, pids, cpu limits per call)`);
}

async function slotsCheck(stateDir: string): Promise<CheckResult> {
  const slots = path.join(path.resolve(stateDir), 'slots');
  const mounts = (await mountTable().catch(() => [])).filter((m) => m.target === slots);
  if (mounts.length === 0) {
    return process.getuid?.() === 0
      ? ok(
          'slots mount',
          `${slots} not mounted yet: the first worker with the docker driver makes it`,
        )
      : warn(
          'slots mount',
          `${slots} is not mounted and this user is not root: warm containers cannot take workspaces (each workspace call starts a container)`,
          'run the worker as root (it has the Docker socket, root-equivalent anyway)',
        );
  }
  if (mounts.length > 1 || !mounts[0]!.shared) {
    return fail(
      'slots mount',
      mounts.length > 1
        ? `${mounts.length} mounts stacked on ${slots}: Docker refuses every slot bind`
        : `${slots} is mounted but not shared: Docker refuses every slot bind`,
      'restart a worker: its start repairs the mount under the host lock (docs/workspaces.md)',
    );
  }
  return ok('slots mount', `${slots} (one shared mount)`);
}
