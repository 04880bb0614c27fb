/** The `toolgate` command: `toolgate plugin new <name> [--dir plugins] [--force]`. */
import { parseArgs } from 'node:util';
import { ScaffoldError, scaffoldPlugin } from './scaffold.js';

const USAGE = `usage: toolgate plugin new <name> [--dir <plugins dir>] [--force]

  Creates <plugins dir>/<name>/ with plugin.mjs, plugin.test.mjs and README.md.
  --dir    plugins directory, relative to where the command was started (default: plugins)
  --force  overwrite the files of an existing plugin folder
`;

export interface CliIo {
  cwd: string;
  out: (text: string) => void;
  err: (text: string) => void;
}

/** Runs the command line; returns the exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        dir: { type: 'string', short: 'd' },
        force: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    io.err(`${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    io.out(USAGE);
    return 0;
  }
  const [group, command, name, ...rest] = positionals;
  if (group !== 'plugin' || command !== 'new' || !name || rest.length > 0) {
    io.err(USAGE);
    return 2;
  }
  try {
    const { dir, files, tool } = await scaffoldPlugin({
      name,
      cwd: io.cwd,
      force: values.force,
      ...(values.dir ? { dir: values.dir } : {}),
    });
    io.out(
      [
        `Created ${dir}`,
        ...files.map((f) => `  ${f}`),
        '',
        `Test it:   node --test ${dir}/plugin.test.mjs`,
        `Load it:   make sure plugins.dirs in the toolgate config includes ${dir.slice(0, dir.lastIndexOf('/'))}`,
        `           (default ./plugins), then restart the gateway and the worker; the tool is "${tool}".`,
        '',
      ].join('\n'),
    );
    return 0;
  } catch (err) {
    if (err instanceof ScaffoldError) {
      io.err(`toolgate: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
