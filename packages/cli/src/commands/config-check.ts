/** `toolgate config check FILE`: every problem of a config file at once, each with its path. */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describeRedis } from '@toolgate/calls';
import { ShardMap, checkConfig } from '@toolgate/config';
import { parseDocument } from 'yaml';
import { colours, type Command } from '../command.js';

export const configCheckCommand: Command = {
  name: 'config check',
  summary: 'validate a config file and list every problem with its path',
  help: `usage: toolgate config check <file>

  Reads the file (YAML or JSON) the way the gateway and worker do: \${VAR} and \${VAR:-default}
  from the environment, the env overrides (REDIS_URL, PORT, TOOLGATE_WORKER_QUEUES, ...),
  defaults, then the schema. Prints every problem, one per line, as "<path>: <message>", where
  the path is a JSON pointer into the file (/clients/0/keySha256) or the env var at fault.
  A clean file prints a summary: clients, plugin directories, Redis, sandbox driver.

Exit codes: 0 valid, 1 problems found (or the file cannot be read or parsed), 2 bad usage.
`,
  args: { min: 1, max: 1 },
  async run({ positionals }, io) {
    const file = path.resolve(io.cwd, positionals[0]!);
    const c = colours(io);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      io.err(`${c.red('✗')} cannot read ${file}: ${(err as Error).message}\n`);
      return 1;
    }
    const doc = parseDocument(text, { prettyErrors: true });
    if (doc.errors.length > 0) {
      io.err(`${c.red('✗')} ${file} is not valid YAML/JSON:\n`);
      for (const error of doc.errors) io.err(`  ${error.message.split('\n')[0]}\n`);
      return 1;
    }
    const { config, problems } = checkConfig(doc.toJS() ?? {}, io.env);
    if (!config) {
      io.err(
        `${c.red('✗')} ${file}: ${problems.length} problem${problems.length === 1 ? '' : 's'}\n`,
      );
      for (const p of problems) io.err(`  ${c.bold(p.path)}: ${p.message}\n`);
      return 1;
    }
    const clients = config.clients.map((cl) => (cl.admin ? `${cl.id} (admin)` : cl.id));
    // Plugin dirs are relative to where the service starts; from here that is a guess.
    const dirs = config.plugins.dirs.map((d) =>
      existsSync(path.resolve(io.cwd, d)) ? d : `${d} (not found from ${io.cwd})`,
    );
    io.out(
      [
        `${c.green('✓')} ${file}: OK`,
        `  clients:  ${clients.length > 0 ? clients.join(', ') : 'none (development mode: one admin key made up at start, loopback only)'}`,
        `  plugins:  ${dirs.join(', ') || 'none'}`,
        ...new ShardMap(config).list.map((shard) =>
          config.redis.shards === undefined
            ? `  redis:    ${describeRedis(shard.redis)} (prefix ${shard.redis.prefix})`
            : `  shard ${shard.id}${shard.home ? ' (home)' : ''}: ${describeRedis(shard.redis)} (prefix ${shard.redis.prefix})`,
        ),
        `  worker:   queues ${config.worker.queues.join(', ')}; sandbox driver ${config.sandbox.driver}`,
        '',
      ].join('\n'),
    );
    return 0;
  },
};
