/**
 * `toolgate sandbox prune`: removes the sandbox containers of toolgate deployments that are
 * gone from this Docker engine (what `toolgate doctor` reports as "sandbox leftovers").
 */
import { ConfigError, loadConfig } from '@toolgate/config';
import path from 'node:path';
import type { Command } from '../command.js';

export const sandboxPruneCommand: Command = {
  name: 'sandbox prune',
  summary: 'remove sandbox containers of gone deployments from this Docker engine',
  help: `usage: toolgate sandbox prune [--dry-run] [--json] [--config <file>]

  Lists the toolgate sandbox containers on the Docker engine (sandbox.docker.socketPath) whose
  worker is gone, and removes them. Gone means: the compose project the worker ran in has no
  running container left (\`docker compose down\`); or the worker ran on this host and its pid
  no longer exists; or it ran in a container that no longer runs; or the sandbox is stopped and
  was made more than 10 minutes ago. Containers of live workers, and of workers this host
  cannot judge (another host sharing the engine), are never touched: their own worker's reaper
  removes what they leave.

  --dry-run        list them, remove nothing
  --json           print [{"id", "name", "state", "status", "image", "composeProject", "reason",
                   "removed"}] instead
  --config <file>  the config file for the socket path (default: $TOOLGATE_CONFIG)

Exit codes: 0 done (or nothing to do), 1 the engine does not answer or a removal failed,
2 bad usage or an invalid config.
`,
  options: {
    'dry-run': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    config: { type: 'string', short: 'c' },
  },
  args: { min: 0, max: 0 },
  async run({ values }, io) {
    const file =
      typeof values.config === 'string'
        ? path.resolve(io.cwd, values.config)
        : io.env.TOOLGATE_CONFIG;
    let socketPath: string;
    try {
      socketPath = loadConfig(io.env, file).sandbox.docker.socketPath;
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      io.err(`toolgate sandbox prune: ${err.message}\n`);
      return 2;
    }
    const { dockerEngine, findLeftovers, removeLeftovers } =
      await import('@toolgate/sandbox/docker');
    const docker = dockerEngine(socketPath);
    let leftovers;
    try {
      leftovers = await findLeftovers(docker);
    } catch (err) {
      io.err(
        `toolgate sandbox prune: cannot list containers on ${socketPath}: ${(err as Error).message}\n`,
      );
      return 1;
    }
    const dryRun = values['dry-run'] === true;
    const failed = dryRun ? [] : await removeLeftovers(docker, leftovers);
    const failedIds = new Set(failed.map((f) => f.leftover.id));
    if (values.json === true) {
      const rows = leftovers.map((l) => ({ ...l, removed: !dryRun && !failedIds.has(l.id) }));
      io.out(`${JSON.stringify(rows, null, 2)}\n`);
    } else {
      for (const l of leftovers) {
        const verb = dryRun ? 'would remove' : failedIds.has(l.id) ? 'could not remove' : 'removed';
        io.out(`${verb} ${l.name} (${l.image}, ${l.status}): ${l.reason}\n`);
      }
      for (const f of failed) io.err(`  ${f.leftover.name}: ${f.error}\n`);
      io.out(
        leftovers.length === 0
          ? 'no sandbox containers of gone deployments\n'
          : `${dryRun ? 'would remove' : 'removed'} ${leftovers.length - failed.length} of ${leftovers.length}\n`,
      );
    }
    return failed.length > 0 ? 1 : 0;
  },
};
