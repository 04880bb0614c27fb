/** What every subcommand is: a name, its help, its flags, and a run function. */
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';

export interface CliIo {
  /** Where the command was typed: relative paths (config files, --dir) start here. */
  cwd: string;
  env: Record<string, string | undefined>;
  out: (text: string) => void;
  err: (text: string) => void;
  /** Whether stdout is a terminal (colours, readable logs). */
  isTTY: boolean;
  /** Whether stderr is a terminal (a progress line drawn in place); default false. */
  stderrIsTTY?: boolean;
  /** Standard input, whole (secret values are read from it, never from argv); default process.stdin. */
  readStdin?: () => Promise<string>;
  /** Stops a command that follows a stream (`--follow`, `-f`); default: SIGINT or SIGTERM. */
  signal?: AbortSignal;
}

export interface Parsed {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

/**
 * A subcommand. `run` returns the exit code, or undefined when a service now owns the process
 * (it exits on its own, on a signal).
 */
export interface Command {
  /** The words that select it: `keys new`. */
  name: string;
  summary: string;
  /** Full help text, printed by `--help`. */
  help: string;
  options?: ParseArgsOptionsConfig;
  /** How many positional arguments it takes. */
  args: { min: number; max: number };
  run(parsed: Parsed, io: CliIo): Promise<number | undefined>;
}

/** Bad usage (unknown flag, missing argument): a message and exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/**
 * The command cannot go on (the gateway is unreachable, it refused): `message` (when any) on
 * stderr and the exit code, without the usage text a UsageError adds.
 */
export class ExitError extends Error {
  constructor(
    readonly exitCode: number,
    message = '',
  ) {
    super(message);
    this.name = 'ExitError';
  }
}

export function parseCommandArgs(command: Command, argv: readonly string[]): Parsed | 'help' {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: { ...command.options, help: { type: 'boolean', short: 'h' } },
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (parsed.values.help) return 'help';
  const { min, max } = command.args;
  const n = parsed.positionals.length;
  if (n < min) throw new UsageError(`toolgate ${command.name}: missing argument`);
  if (n > max)
    throw new UsageError(
      `toolgate ${command.name}: unexpected argument "${parsed.positionals[max]}"`,
    );
  return parsed as Parsed;
}

/** The terminal's colours, off when not a TTY or NO_COLOR is set. */
export function colours(io: Pick<CliIo, 'isTTY' | 'env'>) {
  const on = io.isTTY && !io.env.NO_COLOR;
  const wrap = (code: string) => (text: string) => (on ? `\x1b[${code}m${text}\x1b[0m` : text);
  return {
    on,
    bold: wrap('1'),
    dim: wrap('2'),
    red: wrap('31'),
    green: wrap('32'),
    yellow: wrap('33'),
    blue: wrap('34'),
    magenta: wrap('35'),
    cyan: wrap('36'),
  };
}
