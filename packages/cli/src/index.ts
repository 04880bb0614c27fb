/** @toolgate/cli: the `toolgate` command (docs/cli.md). */
export { runCli, COMMANDS } from './cli.js';
export { UsageError } from './command.js';
export { formatLogLine } from './pretty-log.js';

export type { CliIo, Command } from './command.js';
