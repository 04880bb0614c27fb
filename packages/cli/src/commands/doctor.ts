/** `toolgate doctor`: checks the host and the services' dependencies, and says what to fix. */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, ShardMap, loadConfig } from '@toolgate/config';
import { colours, type Command } from '../command.js';
import { fail, ok, type CheckResult } from '../doctor/check.js';
import { describeRedis } from '@toolgate/calls';

/** deploy/sandbox of the checkout this runs from (absent in the images). */
const SANDBOX_SOURCES = fileURLToPath(new URL('../../../../deploy/sandbox', import.meta.url));
const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));

export const doctorCommand: Command = {
  name: 'doctor',
  summary: 'check Redis, the sandbox driver, images, cgroups, mounts and disk; say what to fix',
  help: `usage: toolgate doctor [--config <file>] [--json]

  Checks, with the config the services would load:
    config            the file loads (every problem: toolgate config check)
    redis             answers; version (needs 6.0, recommends 6.2+); maxmemory-policy
                      must be noeviction; persistence (AOF or RDB) on. With redis.shards:
                      each shard, named (\`redis <id>\`), so a shard that does not answer shows
    sandbox driver    Docker answers on sandbox.docker.socketPath, or bwrap works (per
                      sandbox.driver); skipped when worker.queues has no "sandbox"
    image <name>      each sandbox.images entry present (Docker image / bwrap rootfs) and, in a
                      checkout, built from the current deploy/sandbox sources
    seccomp filter    (bwrap) the compiled filter exists
    cgroups           v1/v2; Docker's own, or writable with memory/pids/cpu for bwrap
    slots mount       (docker) <sandbox.stateDir>/slots is one shared mount, or not made yet
    disk              free space for sandbox.workspacesRoot and Docker's root (warns < 5 GB)
    sandbox leftovers (docker) sandbox containers of deployments that are gone (a compose
                      project taken down, a dead worker); \`toolgate sandbox prune\` removes them
    policy            the Cedar set of policy.cedar parses and validates against its schema
                      (count and hash, or the problems); skipped without policy.cedar
    upstream <id>     each of upstreams: up (tools, when read), down (why) or never read, as
                      the catalog in Redis has it; for npm: the node image has that version
  Each line is ✓ (fine), ! (works, but look), ✗ (broken) or - (skipped), with the fix below.
  Run it where the worker runs: paths (rootfs, seccomp filter) resolve from the repository root
  in a checkout, else from the current directory.

  --config <file>  the config file (default: $TOOLGATE_CONFIG)
  --json           print [{"name", "status", "detail", "fix"}] instead

Exit codes: 0 nothing broken (warnings allowed), 1 at least one ✗, 2 bad usage.
`,
  options: { config: { type: 'string', short: 'c' }, json: { type: 'boolean', default: false } },
  args: { min: 0, max: 0 },
  async run({ values }, io) {
    const file =
      typeof values.config === 'string'
        ? path.resolve(io.cwd, values.config)
        : io.env.TOOLGATE_CONFIG;
    const results: CheckResult[] = [];
    let config;
    try {
      config = loadConfig(io.env, file);
      results.push(ok('config', file ? `${file} loads` : 'no file: defaults and env'));
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      results.push(
        fail(
          'config',
          err.message,
          `toolgate config check ${file ?? '<file>'} lists every problem`,
        ),
      );
    }
    if (config) {
      const { checkPolicy } = await import('../doctor/policy.js');
      results.push(checkPolicy(config));
      const { checkRedis } = await import('../doctor/redis.js');
      const { checkSandbox } = await import('../doctor/sandbox.js');
      const { checkUpstreams } = await import('../doctor/upstreams.js');
      if (config.redis.shards === undefined)
        results.push(...(await checkRedis(config.redis, describeRedis(config.redis))));
      else
        for (const shard of new ShardMap(config).list)
          results.push(
            ...(await checkRedis(shard.redis, describeRedis(shard.redis), `redis ${shard.id}`)),
          );
      const checkout = existsSync(SANDBOX_SOURCES);
      results.push(
        ...(await checkSandbox(config, {
          cwd: checkout && isRepo(REPO_ROOT) ? REPO_ROOT : io.cwd,
          env: io.env,
          ...(checkout ? { sandboxSources: SANDBOX_SOURCES } : {}),
        })),
      );
      results.push(
        ...(await checkUpstreams(config, {
          cwd: checkout && isRepo(REPO_ROOT) ? REPO_ROOT : io.cwd,
          env: io.env,
        })),
      );
    }
    if (values.json) {
      io.out(`${JSON.stringify(results, null, 2)}\n`);
    } else {
      const c = colours(io);
      const mark = { ok: c.green('✓'), warn: c.yellow('!'), fail: c.red('✗'), skip: c.dim('-') };
      const width = Math.max(...results.map((r) => r.name.length));
      for (const r of results) {
        io.out(`${mark[r.status]} ${r.name.padEnd(width)}  ${r.detail}\n`);
        if (r.fix) io.out(`  ${' '.repeat(width)}  ${c.dim('fix:')} ${r.fix}\n`);
      }
      const failed = results.filter((r) => r.status === 'fail').length;
      const warned = results.filter((r) => r.status === 'warn').length;
      io.out(
        `\n${failed > 0 ? c.red(`${failed} broken`) : c.green('nothing broken')}${warned > 0 ? `, ${warned} warning${warned === 1 ? '' : 's'}` : ''}\n`,
      );
    }
    return results.some((r) => r.status === 'fail') ? 1 : 0;
  },
};

function isRepo(dir: string): boolean {
  try {
    return (
      (JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string })
        .name === 'toolgate'
    );
  } catch {
    return false;
  }
}
