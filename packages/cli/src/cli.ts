/** The `toolgate` command line: picks the subcommand by its words and runs it. */
import { ExitError, UsageError, parseCommandArgs, type CliIo, type Command } from './command.js';
import { approvalsCommand, approveCommand, denyCommand } from './commands/approvals.js';
import {
  callsCancelCommand,
  callsCommand,
  callsLogsCommand,
  callsShowCommand,
} from './commands/calls.js';
import { callCommand, toolsCommand } from './commands/remote.js';
import { auditCommand } from './commands/audit.js';
import { completionCommand, runComplete } from './commands/completion.js';
import { configCheckCommand } from './commands/config-check.js';
import { doctorCommand } from './commands/doctor.js';
import { keysNewCommand } from './commands/keys.js';
import { loginCommand, logoutCommand } from './commands/login.js';
import { pluginNewCommand } from './commands/plugin.js';
import { policyCheckCommand, policyTestCommand } from './commands/policy.js';
import { sandboxPruneCommand } from './commands/sandbox-prune.js';
import {
  secretsDeleteCommand,
  secretsListCommand,
  secretsRotateCommand,
  secretsSetCommand,
} from './commands/secrets.js';
import { gatewayCommand, workerCommand } from './commands/service.js';
import { sessionsCommand, sessionsEndCommand } from './commands/sessions.js';
import { shardsCommand, shardsMoveCommand } from './commands/shards.js';
import { statsCommand } from './commands/stats.js';
import { upCommand } from './commands/up.js';
import { upstreamsApproveCommand, upstreamsCommand } from './commands/upstreams.js';

export const COMMANDS: readonly Command[] = [
  upCommand,
  gatewayCommand,
  workerCommand,
  doctorCommand,
  sandboxPruneCommand,
  configCheckCommand,
  policyCheckCommand,
  policyTestCommand,
  keysNewCommand,
  secretsSetCommand,
  secretsListCommand,
  secretsDeleteCommand,
  secretsRotateCommand,
  loginCommand,
  logoutCommand,
  toolsCommand,
  callCommand,
  callsCommand,
  callsShowCommand,
  callsLogsCommand,
  callsCancelCommand,
  approvalsCommand,
  approveCommand,
  denyCommand,
  upstreamsCommand,
  upstreamsApproveCommand,
  sessionsCommand,
  sessionsEndCommand,
  shardsCommand,
  shardsMoveCommand,
  auditCommand,
  statsCommand,
  pluginNewCommand,
  completionCommand(() => COMMANDS),
];

function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    'usage: toolgate <command> [options]',
    '',
    'Commands:',
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'Run `toolgate <command> --help` for its options. Docs: docs/cli.md',
    '',
  ].join('\n');
}

/** Runs the command line; returns the exit code (undefined: a service now owns the process). */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number | undefined> {
  const [first] = argv;
  // What the completion scripts call (not listed: no one types it).
  if (first === '__complete') return runComplete(COMMANDS, argv.slice(1), io);
  if (first === undefined || first === '--help' || first === '-h' || first === 'help') {
    const topic = first === 'help' ? argv.slice(1).join(' ') : '';
    const command = COMMANDS.find((c) => c.name === topic);
    if (command) {
      io.out(command.help);
      return 0;
    }
    (first === undefined ? io.err : io.out)(usage());
    return first === undefined ? 2 : 0;
  }
  // The longest name whose words start the line: `keys new` before a group named `keys`.
  const command = [...COMMANDS]
    .sort((a, b) => b.name.length - a.name.length)
    .find((c) => {
      const words = c.name.split(' ');
      return words.every((w, i) => argv[i] === w);
    });
  if (!command) {
    const group = COMMANDS.filter((c) => c.name.split(' ')[0] === first);
    if (group.length > 0 && (argv[1] === undefined || argv[1].startsWith('-'))) {
      const asked = argv[1] === '--help' || argv[1] === '-h';
      (asked ? io.out : io.err)(group.map((c) => c.help).join('\n'));
      return asked ? 0 : 2;
    }
    const what = group.length > 0 ? `${first} ${argv[1]}` : first;
    io.err(`toolgate: unknown command "${what}"\n\n${usage()}`);
    return 2;
  }
  try {
    const parsed = parseCommandArgs(command, argv.slice(command.name.split(' ').length));
    if (parsed === 'help') {
      io.out(command.help);
      return 0;
    }
    return await command.run(parsed, io);
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`${err.message}\n\n${command.help}`);
      return 2;
    }
    if (err instanceof ExitError) {
      if (err.message) io.err(err.message.endsWith('\n') ? err.message : `${err.message}\n`);
      return err.exitCode;
    }
    throw err;
  }
}
