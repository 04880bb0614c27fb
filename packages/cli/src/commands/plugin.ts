/** `toolgate plugin new <name>`: the scaffolder of @toolgate/plugins, from the command line. */
import { ScaffoldError, scaffoldPlugin } from '@toolgate/plugins';
import type { Command } from '../command.js';

export const pluginNewCommand: Command = {
  name: 'plugin new',
  summary: 'create a plugin folder (plugin.mjs, its test, a README)',
  help: `usage: toolgate plugin new <name> [--dir <plugins dir>] [--force]

  Creates <plugins dir>/<name>/ with plugin.mjs, plugin.test.mjs and README.md.

  --dir, -d  plugins directory, relative to where the command was started (default: plugins)
  --force    overwrite the files of an existing plugin folder

Exit codes: 0 created, 1 refused (bad name, folder exists), 2 bad usage.
`,
  options: {
    dir: { type: 'string', short: 'd' },
    force: { type: 'boolean', default: false },
  },
  args: { min: 1, max: 1 },
  async run({ values, positionals }, io) {
    try {
      const { dir, files, tool } = await scaffoldPlugin({
        name: positionals[0]!,
        cwd: io.cwd,
        force: values.force === true,
        ...(typeof values.dir === 'string' ? { dir: values.dir } : {}),
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
  },
};
