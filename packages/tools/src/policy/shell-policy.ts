/**
 * The run_shell command policy (docs/spec.md §6, `policy.shell`).
 *
 * This is a first filter and the sandbox is the real boundary: it turns away the obviously
 * destructive or out-of-scope commands a model might produce, with a message the model can act
 * on, but a determined program can always evade a text filter (an interpreter, a script written
 * to a file, an encoded payload), so nothing here replaces the sandbox's isolation — no network,
 * read-only root, dropped capabilities, resource limits.
 *
 * - `blocklist` mode: every simple command on the line (split on `;`, `&&`, `||`, `|`, newlines,
 *   inside `$(…)`, backticks, subshells, here-documents, `sh -c`, `eval`, `find -exec`, `xargs`,
 *   after wrappers such as `sudo`, `env`, `command`, `nice`, `timeout`) is checked against rules
 *   (rm -rf /, mkfs, dd if=, fork bombs, chmod 777 /, curl/wget, netcat, shutdown, writes to
 *   disks, …), after quote removal, `/bin/rm`-style paths, `$IFS`, brace expansion and simple
 *   variable assignments are resolved. So is every command bash runs from somewhere else on the
 *   line: the operands of `${…}`, arithmetic, trap handlers, aliases, `mapfile -C`, prompt and
 *   PROMPT_COMMAND values, exported functions, and the variables whose values bash evaluates
 *   (`x='a[$(id)]'; echo $((x))`, `${!x}`, `${x@P}`). Code the policy cannot see because it is
 *   built at run time — `eval "$(…)"`, `sh -c "$X"`, a program name computed at run time, a
 *   trap handler from a variable — is refused as `too_complex` rather than let through.
 * - `allowlist` mode: additionally every program — including the ones a wrapper runs or a
 *   handler hides — must be listed in `policy.allow`; programs and scripts computed at run time
 *   (`dynamic_program`), and assignments to PATH, LD_PRELOAD, PS4 and the like, are denied.
 *
 * The check runs on the gateway's event loop, so its cost is bounded whatever the input's shape
 * (docs/policy-budgets.md): brace products, variable growth, nesting and scanning are charged to
 * a Budget as they are produced, and a command that would pass it is refused as `too_complex`.
 */
import path from 'node:path';
import { Budget, DEFAULT_BUDGET, TooComplexError, type BudgetLimits } from './budget.js';
import {
  parseArithmetic,
  parsePromptText,
  parseShell,
  plainText,
  ShellSyntaxError,
  type Code,
  type Evaluation,
  type ParseNotes,
  type SimpleCommand,
  type Word,
} from './shell-syntax.js';

/** The ToolError code run_shell uses for a command the policy refuses. */
export const POLICY_DENIED = 'policy_denied';

/** `policy.shell` from the config. */
export interface ShellPolicy {
  mode: 'blocklist' | 'allowlist';
  allow: readonly string[];
}

export type ShellRule =
  | 'rm_root'
  | 'disk_format'
  | 'dd'
  | 'fork_bomb'
  | 'chmod_root'
  | 'mv_root'
  | 'download'
  | 'netcat'
  | 'reverse_shell'
  | 'power'
  | 'kill_all'
  | 'device_write'
  | 'pipe_to_shell'
  | 'not_allowed'
  | 'dynamic_program'
  | 'env_override'
  | 'unparseable'
  | 'too_complex';

export type ShellCheckResult =
  | { ok: true }
  | {
      ok: false;
      rule: ShellRule;
      /** Says what was refused and why, for the model to read. */
      message: string;
      /** The program the decision is about, when there is one. */
      program?: string;
      /** The simple command that was refused, as the policy read it. */
      command?: string;
    };

type Denial = Extract<ShellCheckResult, { ok: false }>;

/** An argument after quote removal; `dynamic` when part of it is only known at run time. */
interface Arg {
  text: string;
  dynamic: boolean;
  /**
   * The program name it would run is not known: a dynamic part after its last `/`, or an
   * unquoted one (its value may split into a whole command line).
   */
  nameUnknown?: boolean;
  /** It names a process substitution `<(…)`: reading it reads another command's output. */
  process?: boolean;
  /** An array's elements `a=( … )`, when every one is known. */
  elements?: string[];
}

/** A refusal found deep inside an expansion; caught by checkShellCommand. */
class Refusal extends Error {
  constructor(readonly denial: Denial) {
    super(denial.message);
    this.name = 'Refusal';
  }
}

/** run_shell's own limit (its schema's maxLength): the check never needs to read more. */
const MAX_COMMAND_CHARS = 32_768;
/** Fork bombs are short: function bodies are examined this far, so the check stays linear. */
const MAX_FUNCTION_BODY_CHARS = 512;
const MAX_SCRIPT_DEPTH = 8;
/** Longest `{x..y}` operand text looked at: longer contents cannot be a sequence we count. */
const MAX_SEQUENCE_CHARS = 64;
/** The sandbox's working directory: relative `..` paths are resolved from here. */
const WORKDIR = '/workspace';

const SHELLS = new Set(['sh', 'bash', 'dash', 'zsh', 'ksh', 'ash', 'mksh', 'yash', 'posh', 'fish']);
const SYSTEM_DIRS = new Set([
  'bin',
  'boot',
  'dev',
  'etc',
  'home',
  'lib',
  'lib32',
  'lib64',
  'libx32',
  'opt',
  'proc',
  'root',
  'run',
  'sbin',
  'srv',
  'sys',
  'usr',
  'var',
]);
const STANDARD_BIN_DIRS = new Set([
  '/bin',
  '/usr/bin',
  '/usr/local/bin',
  '/sbin',
  '/usr/sbin',
  '/usr/local/sbin',
]);
const DISK_FORMAT = new Set([
  'mke2fs',
  'mkswap',
  'wipefs',
  'mkdosfs',
  'mkntfs',
  'fdisk',
  'sfdisk',
  'cfdisk',
  'gdisk',
  'sgdisk',
  'parted',
  'blkdiscard',
]);
const DOWNLOADERS = new Set(['curl', 'wget', 'aria2c', 'axel', 'lwp-download', 'lwp-request']);
const NETCATS = new Set([
  'nc',
  'ncat',
  'netcat',
  'socat',
  'telnet',
  'nc.openbsd',
  'nc.traditional',
]);
const POWER = new Set(['shutdown', 'reboot', 'halt', 'poweroff', 'kexec', 'telinit']);
const SYSTEMCTL_POWER = new Set([
  'poweroff',
  'reboot',
  'halt',
  'kexec',
  'suspend',
  'hibernate',
  'hybrid-sleep',
  'rescue',
  'emergency',
  'soft-reboot',
]);
/** Raw disks and kernel memory: writing to them destroys data or the machine. */
const DEVICE = /^\/dev\/(?:sd|hd|vd|xvd|nvme|mmcblk|dm-|md|loop|disk\/|mapper\/|mem$|kmem$|port$)/;
const DEVICE_WRITERS = new Set(['tee', 'cp', 'mv', 'shred', 'dd', 'truncate', 'install', 'cat']);
const DECLARATIONS = new Set(['export', 'declare', 'local', 'readonly', 'typeset']);
/** Assignments that change which program runs or what a shell executes. */
const DANGEROUS_VARIABLES =
  /^(?:PATH|LD_[A-Z_]+|BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS[0-4]|PROMPT_COMMAND|IFS|BASH_FUNC_.*)$/;
/**
 * Variables whose value bash runs as code: PROMPT_COMMAND (a command line), PS0–PS4 (prompts:
 * their `$(…)` run, PS4 on every traced command with `set -x`), BASH_ENV / ENV (a file sourced
 * by every non-interactive shell), BASH_FUNC_name%% (an exported function's body).
 */
const CODE_VARIABLES = /^(?:PROMPT_COMMAND|PS[0-4]|BASH_ENV|ENV|BASH_FUNC_.*)$/;
/** Builtins whose name operands may carry a subscript, which bash evaluates as arithmetic. */
const NAME_BUILTINS = new Set([
  'unset',
  'read',
  'printf',
  'mapfile',
  'readarray',
  'wait',
  'getopts',
  'export',
  'declare',
  'local',
  'readonly',
  'typeset',
]);
/** Shell variables that always hold a number (unless the line sets them). */
const NUMERIC_VARIABLES = new Set([
  'RANDOM',
  'SRANDOM',
  'SECONDS',
  'EPOCHSECONDS',
  'LINENO',
  'BASHPID',
  'PPID',
  'UID',
  'EUID',
]);
/** Where a shell reading a file name would read commands from a pipe. */
const STDIN_PATHS = /^\/(?:dev\/stdin|dev\/fd\/\d+|proc\/self\/fd\/\d+)$/;

export function checkShellCommand(
  command: string,
  policy: ShellPolicy,
  limits: Readonly<BudgetLimits> = DEFAULT_BUDGET,
): ShellCheckResult {
  const checker = new Checker(policy, new Budget(limits));
  try {
    return checker.script(command, 0) ?? { ok: true };
  } catch (err) {
    if (err instanceof Refusal) return err.denial;
    if (err instanceof TooComplexError) {
      return deny(
        'too_complex',
        `the command is too complex to check: ${err.message}; write it out plainly or split it into simpler commands`,
      );
    }
    throw err;
  }
}

function deny(
  rule: ShellRule,
  message: string,
  extra: { program?: string; argv?: Arg[] } = {},
): Denial {
  return {
    ok: false,
    rule,
    message,
    ...(extra.program !== undefined ? { program: extra.program } : {}),
    ...(extra.argv ? { command: render(extra.argv) } : {}),
  };
}

function render(argv: Arg[]): string {
  return argv
    .map((a) => {
      const t = a.dynamic ? `${a.text}…` : a.text;
      return /[\s'"\\$`]/.test(t) || t === '' ? `'${t.replace(/'/g, "'\\''")}'` : t;
    })
    .join(' ');
}

/** The program name a command word runs: the last path component (`/bin/rm` → `rm`). */
function baseName(text: string): string {
  const i = text.lastIndexOf('/');
  return i === -1 ? text : text.slice(i + 1);
}

/**
 * Paths whose recursive removal, chmod or move wrecks the system: `/`, anything directly
 * under `/` that is a glob or a system directory, the home directory; `..` climbs are
 * resolved from the working directory.
 */
function isRootish(arg: Arg): boolean {
  let p = arg.text;
  if (p === '') return false;
  if (p.startsWith('~')) {
    const rest = p.replace(/^~[^/]*/, '');
    // (Not `\/+\.?\/*`: two slash runs side by side backtrack quadratically on `~////…x`.)
    return rest === '' || /^\/+(?:\.\/*|\*|\.\*)?$/.test(rest);
  }
  if (!p.startsWith('/')) {
    if (!p.startsWith('..')) return false;
    p = path.posix.resolve(WORKDIR, p);
  }
  const normalized = path.posix.normalize(p).replace(/\/+$/, '').replace(/\/\.$/, '') || '/';
  if (normalized === '/' || normalized === '/.') return true;
  const dir = path.posix.dirname(normalized);
  const base = path.posix.basename(normalized);
  const glob = /[*?[]/.test(base);
  if (dir === '/') return SYSTEM_DIRS.has(base) || glob;
  // Everything inside a system directory at once: /etc/*, /home/*.
  return glob && path.posix.dirname(dir) === '/' && SYSTEM_DIRS.has(path.posix.basename(dir));
}

/** Splits leading options off `args` (short clusters, `--long[=v]`) up to the first operand. */
function skipOptions(
  args: Arg[],
  start: number,
  withValue: string,
  longWithValue: readonly string[] = [],
): { index: number; options: string[] } {
  const options: string[] = [];
  let i = start;
  while (i < args.length) {
    const a = args[i]!.text;
    if (a === '--') return { index: i + 1, options };
    if (!a.startsWith('-') || a === '-') break;
    options.push(a);
    if (a.startsWith('--')) {
      if (!a.includes('=') && longWithValue.includes(a)) i++;
      i++;
      continue;
    }
    for (let j = 1; j < a.length; j++) {
      if (withValue.includes(a[j]!)) {
        if (j === a.length - 1) i++;
        break;
      }
    }
    i++;
  }
  return { index: i, options };
}

/** env and sudo take any `NAME=value` before the command, `BASH_FUNC_f%%=() { …; }` included. */
const isAssignment = (a: Arg) => /^[^=/\s-][^=/\s]*=/.test(a.text);

/** What running `argv` really runs: the inner command of a wrapper, or a script string. */
interface Unwrapped {
  inner?: Arg[];
  scripts?: Arg[];
  /** find -exec: commands run per file. */
  extra?: Arg[][];
  /** Assignments a wrapper (env, sudo) makes for the inner command. */
  assignments?: Arg[];
}

function unwrap(program: string, argv: Arg[]): Unwrapped | undefined {
  const args = argv;
  switch (program) {
    case 'sudo':
    case 'doas': {
      const { index, options } = skipOptions(args, 1, program === 'sudo' ? 'ugpChDrtUTR' : 'uCa', [
        '--user',
        '--group',
        '--prompt',
        '--close-from',
        '--chdir',
        '--role',
        '--type',
        '--other-user',
        '--command-timeout',
        '--chroot',
        '--host',
      ]);
      let i = index;
      const assignments: Arg[] = [];
      while (i < args.length && isAssignment(args[i]!)) assignments.push(args[i++]!);
      // sudo -s / -i CMD…: the shell runs the words as a command line (`$SHELL -c 'CMD …'`).
      const shell = options.some(
        (o) => o === '--shell' || o === '--login' || /^-[^-]*[si]/.test(o),
      );
      if (program === 'sudo' && shell && i < args.length) return { scripts: args.slice(i) };
      return { inner: args.slice(i), assignments };
    }
    case 'env': {
      const { index } = skipOptions(args, 1, 'uCS', ['--unset', '--chdir', '--split-string']);
      // -S "cmd args": the string is split into a command line, followed by the operands.
      for (let i = 1; i < index; i++) {
        const t = args[i]!.text;
        const attached = /^-[^-]*S(.+)$/s.exec(t) ?? /^--split-string=(.*)$/s.exec(t);
        if (attached) {
          return { scripts: [{ ...args[i]!, text: attached[1]! }, ...args.slice(i + 1)] };
        }
        if (/^-[^-]*S$/.test(t) || t === '--split-string') return { scripts: args.slice(i + 1) };
      }
      let i = index;
      const assignments: Arg[] = [];
      while (i < args.length && isAssignment(args[i]!)) assignments.push(args[i++]!);
      return { inner: args.slice(i), assignments };
    }
    case 'command':
    case 'builtin':
    case 'nohup':
    case 'setsid':
    case 'unbuffer':
    case 'unshare':
    case 'time':
    case 'exec':
    case 'nice':
    case 'ionice':
    case 'stdbuf':
    case 'strace':
    case 'ltrace':
    case 'runuser': {
      const withValue: Record<string, string> = {
        exec: 'a',
        nice: 'n',
        ionice: 'cnpPu',
        stdbuf: 'ioe',
        time: 'fo',
        strace: 'eoOpPsSuIXabE',
        ltrace: 'eoOpPsSuIXabEnlL',
        runuser: 'ugGswc',
      };
      const { index, options } = skipOptions(args, 1, withValue[program] ?? '', [
        '--adjustment',
        '--format',
        '--output',
        '--user',
        '--group',
        '--command',
      ]);
      if (program === 'runuser') {
        const c = commandOption(args, options);
        if (c) return { scripts: [c] };
      }
      return { inner: args.slice(index) };
    }
    case 'su':
    case 'script': {
      const { options } = skipOptions(args, 1, 'cgGs', ['--command', '--group', '--shell']);
      const c = commandOption(args, options);
      return c ? { scripts: [c] } : undefined;
    }
    case 'timeout': {
      const { index } = skipOptions(args, 1, 'sk', ['--signal', '--kill-after']);
      return { inner: args.slice(index + 1) };
    }
    case 'chroot': {
      const { index } = skipOptions(args, 1, '', ['--userspec', '--groups']);
      return { inner: args.slice(index + 1) };
    }
    case 'taskset': {
      const { index, options } = skipOptions(args, 1, '', ['--cpu-list']);
      if (options.some((o) => o.includes('p'))) return undefined;
      const list = options.some((o) => /^-[^-]*c|^--cpu-list/.test(o));
      return { inner: args.slice(index + (list ? 0 : 1)) };
    }
    case 'flock': {
      const { index, options } = skipOptions(args, 1, 'wEc', [
        '--timeout',
        '--conflict-exit-code',
        '--command',
      ]);
      const c = commandOption(args, options);
      if (c) return { scripts: [c] };
      return { inner: args.slice(index + 1) };
    }
    case 'busybox':
      return { inner: args.slice(1) };
    case 'xargs': {
      const { index } = skipOptions(args, 1, 'aEILnPsd', [
        '--arg-file',
        '--delimiter',
        '--eof',
        '--replace',
        '--max-lines',
        '--max-args',
        '--max-procs',
        '--max-chars',
        '--process-slot-var',
      ]);
      // The items read from stdin are appended (or replace the -I string): arguments only
      // known at run time, which can be the program (`xargs env`) or the script (`xargs sh -c`).
      let marker: string | undefined;
      for (let i = 1; i < index; i++) {
        const t = args[i]!.text;
        if (t === '-I') marker = args[i + 1]?.text;
        else if (/^-I./.test(t)) marker = t.slice(2);
        else if (t === '-i' || t === '--replace') marker = '{}';
        else if (/^-i./.test(t)) marker = t.slice(2);
        else if (t.startsWith('--replace=')) marker = t.slice('--replace='.length);
      }
      const inner: Arg[] = args.slice(index);
      if (inner.length === 0) inner.push({ text: 'echo', dynamic: false });
      if (marker === undefined) {
        inner.push({ text: '', dynamic: true, nameUnknown: true });
        return { inner };
      }
      return {
        inner: inner.map((a) =>
          a.text.includes(marker) ? { ...a, dynamic: true, nameUnknown: true } : a,
        ),
      };
    }
    case 'watch': {
      const { index, options } = skipOptions(args, 1, 'nq', ['--interval']);
      if (options.some((o) => o === '-x' || o === '--exec' || /^-[^-]*x/.test(o))) {
        return { inner: args.slice(index) };
      }
      return { scripts: args.slice(index) };
    }
    case 'eval':
      return { scripts: args.slice(1) };
    case 'trap': {
      // trap HANDLER SIGNAL…: the handler runs later (EXIT, ERR, DEBUG, a signal). A single
      // operand, `-` or '' resets or ignores signals: nothing runs.
      const { index } = skipOptions(args, 1, '', []);
      const handler = args[index];
      if (!handler || args.length - index < 2) return undefined;
      if (!handler.dynamic && (handler.text === '-' || handler.text === '')) return undefined;
      return { scripts: [handler] };
    }
    case 'alias': {
      // alias name=value: with expand_aliases, the value runs wherever name is a command.
      const values = args.slice(1).filter((a) => a.text.includes('=') || a.dynamic);
      if (values.length === 0) return undefined;
      const text = values.map((a) => a.text.slice(a.text.indexOf('=') + 1)).join('\n');
      return { scripts: [{ text, dynamic: values.some((a) => a.dynamic) }] };
    }
    case 'compgen':
    case 'complete': {
      // -C COMMAND: run to produce completions (compgen runs it at once).
      const c = args.findIndex((a) => a.text === '-C');
      return c !== -1 && args[c + 1] ? { scripts: [args[c + 1]!] } : undefined;
    }
    case 'hash': {
      // hash -p PATH NAME: NAME runs PATH from now on; check PATH as the program.
      const p = args.findIndex((a) => a.text === '-p');
      return p !== -1 && args[p + 1] ? { inner: [args[p + 1]!] } : undefined;
    }
    case 'mapfile':
    case 'readarray': {
      // -C CALLBACK: evaluated every -c lines read.
      const { options } = skipOptions(args, 1, 'dnOsuCc', []);
      const c = args.findIndex(
        (a, i) => i > 0 && options.includes(a.text) && /^-[^-]*C$/.test(a.text),
      );
      return c !== -1 && args[c + 1] ? { scripts: [args[c + 1]!] } : undefined;
    }
    case 'find': {
      const extra: Arg[][] = [];
      for (let i = 1; i < args.length; i++) {
        if (/^-(exec|execdir|ok|okdir)$/.test(args[i]!.text)) {
          const start = i + 1;
          let end = start;
          while (end < args.length && args[end]!.text !== ';' && args[end]!.text !== '+') end++;
          // {} is a file name found at run time: as the program or a script it is unknown.
          extra.push(
            args
              .slice(start, end)
              .map((a) => (a.text.includes('{}') ? { ...a, dynamic: true, nameUnknown: true } : a)),
          );
          i = end;
        }
      }
      return extra.length > 0 ? { extra } : undefined;
    }
    default:
      if (SHELLS.has(program)) {
        const { index, options } = skipOptions(args, 1, 'oO', []);
        const hasC = options.some((o) => /^-[^-]*c/.test(o));
        if (hasC && index < args.length) return { scripts: [args[index]!] };
      }
      return undefined;
  }
}

/** The argument of `-c CMD` / `--command=CMD` / `--command CMD` among parsed options. */
function commandOption(args: Arg[], options: string[]): Arg | undefined {
  const parsed = new Set(options);
  for (let i = 1; i < args.length; i++) {
    const t = args[i]!.text;
    if (!parsed.has(t)) continue;
    if (t.startsWith('--command=')) return { text: t.slice(10), dynamic: args[i]!.dynamic };
    if (t === '--command' || /^-[^-]*c$/.test(t)) return args[i + 1];
  }
  return undefined;
}

class Checker {
  private readonly allow: Set<string> | undefined;
  /** Variables set on the line: the value, or undefined when it is only known at run time. */
  private readonly env = new Map<string, string | undefined>();
  /** Aliases defined on the line: name → the text that replaces it as a command's first word. */
  private readonly aliases = new Map<string, string>();
  /** Loop variables over known words: each value they take in turn. */
  private readonly choices = new Map<string, string[]>();
  /** Variables declared integer (`declare -i n`): every value assigned is arithmetic. */
  private readonly integers = new Set<string>();
  /** How deep the script being checked is nested (sh -c, eval, trap handlers, values run as code). */
  private depth = 0;
  /** Shared by every parse of the line (the top-level one comes first). */
  private readonly notes: ParseNotes = { quotedCode: false };

  constructor(
    policy: ShellPolicy,
    private readonly budget: Budget,
  ) {
    this.allow = policy.mode === 'allowlist' ? new Set(policy.allow) : undefined;
  }

  script(source: string, depth: number): Denial | undefined {
    if (depth > MAX_SCRIPT_DEPTH) {
      return deny('unparseable', 'the command nests shells too deeply to be checked');
    }
    if (source.length > MAX_COMMAND_CHARS) {
      return deny('unparseable', `the command is longer than ${MAX_COMMAND_CHARS} characters`);
    }
    const raw = rawChecks(source, this.budget);
    if (raw) return raw;
    let commands: SimpleCommand[];
    try {
      commands = parseShell(source, this.budget, depth, this.notes);
    } catch (err) {
      if (!(err instanceof ShellSyntaxError)) throw err;
      return deny(
        'unparseable',
        `the command could not be parsed (${err.message}); fix the quoting or split it into simpler commands`,
      );
    }
    const outer = this.depth;
    this.depth = depth;
    try {
      for (const cmd of commands) {
        const denial = this.command(cmd);
        if (denial) return denial;
      }
      return undefined;
    } finally {
      this.depth = outer;
    }
  }

  /**
   * Code the policy cannot see, because bash builds it at run time: refused as too_complex in
   * blocklist mode, as dynamic_program in allowlist mode.
   */
  private opaque(what: string, extra: { program?: string; argv?: Arg[] } = {}): Denial {
    return this.allow
      ? deny('dynamic_program', `${what}, which allowlist mode cannot check`, extra)
      : deny(
          'too_complex',
          `the command is too complex to check: ${what}, so the policy cannot see what it would run; write the command out plainly`,
          extra,
        );
  }

  /** Commands and evaluations found in a value or operand bash runs. */
  private code(code: Code, seen: Set<string> = new Set()): Denial | undefined {
    for (const cmd of code.commands) {
      const d = this.command(cmd);
      if (d) return d;
    }
    for (const ev of code.evaluates) {
      const d = this.evaluate(ev, seen);
      if (d) return d;
    }
    return undefined;
  }

  /** Text bash evaluates as arithmetic (a value, a subscript, a `let` expression). */
  private arithmetic(text: string, seen: Set<string> = new Set()): Denial | undefined {
    if (!/[$`A-Za-z_]/.test(text)) return undefined; // numbers and operators only
    try {
      return this.code(
        parseArithmetic(text, this.budget, this.depth + 1 + seen.size, this.notes),
        seen,
      );
    } catch (err) {
      if (!(err instanceof ShellSyntaxError)) throw err;
      return deny(
        'unparseable',
        `"${text}" is evaluated as arithmetic but does not parse (${err.message})`,
      );
    }
  }

  /**
   * What bash does with a variable's value beyond substituting it. A value set on the line is
   * parsed and checked like the line; a value only known at run time cannot be, and is refused
   * where bash runs it as a name or a prompt (`${!x}`, `${x@P}`). Arithmetic on such a value
   * is allowed: `n=$(wc -l <f); echo $((n+1))` is ordinary, and a program's output is data the
   * policy does not follow (as a script file's content is not followed).
   */
  private evaluate(ev: Evaluation, seen: Set<string>): Denial | undefined {
    this.budget.step(1);
    if (ev.as === 'assign') return this.assign(ev.name, undefined, true);
    // Absent: set by the sandbox's environment, not by the line. Seen: bash stops the loop.
    if (!this.env.has(ev.name) || seen.has(ev.name)) return undefined;
    const known = this.env.get(ev.name);
    const values = known !== undefined ? [known] : this.choices.get(ev.name);
    if (values === undefined) {
      // Arithmetic on a value a program printed is ordinary (`n=$(wc -l <f); $((n+1))`); but
      // when the line itself carries code in a quoted string, that string may be the value
      // (`read x <<< 'a[$(cmd)]'`, `printf -v x '%s' …`), and bash would run it.
      if (ev.as === 'arith' && !this.notes.quotedCode) return undefined;
      if (ev.as === 'arith') {
        return this.opaque(
          `${ev.name} is evaluated as arithmetic with a value computed at run time, and the line holds code in a quoted string that value may carry`,
        );
      }
      const form = ev.as === 'prompt' ? `\${${ev.name}@P}` : `\${!${ev.name}}`;
      return this.opaque(`${form} evaluates a value computed at run time`);
    }
    seen.add(ev.name);
    try {
      for (const value of values) {
        // Each evaluation parses its value afresh: charged as a short line's worth of work, so
        // a value naming others many times over (v2='v1+v1+v1') stops at the budget.
        this.budget.step(16);
        const d =
          ev.as === 'prompt'
            ? this.code(
                parsePromptText(value, this.budget, this.depth + 1 + seen.size, this.notes),
                seen,
              )
            : this.arithmetic(value, seen);
        if (d) return d;
      }
      return undefined;
    } catch (err) {
      if (!(err instanceof ShellSyntaxError)) throw err;
      return deny(
        'unparseable',
        `the value of ${ev.name} is run as code but does not parse (${err.message})`,
      );
    } finally {
      seen.delete(ev.name);
    }
  }

  /**
   * A variable set on the line (`remember`: for the rest of it, not just one command's
   * environment). Values bash runs as code (CODE_VARIABLES) are checked as code.
   */
  private assign(name: string, value: Arg | undefined, remember: boolean): Denial | undefined {
    if (this.allow && DANGEROUS_VARIABLES.test(name)) {
      return deny('env_override', `setting ${name} is not allowed in allowlist mode`);
    }
    const known = value && !value.dynamic ? value.text : undefined;
    if (known !== undefined && this.integers.has(name)) {
      const d = this.arithmetic(known);
      if (d) return d;
    }
    if (remember) {
      this.env.set(name, known);
      this.choices.delete(name);
      // An array used by name in arithmetic evaluates its element 0, and a[i] any element.
      if (value?.elements) this.choices.set(name, value.elements);
    }
    if (!CODE_VARIABLES.test(name)) return undefined;
    if (known === undefined) {
      return this.opaque(
        `${name} is set to a value computed at run time, and bash runs it as code`,
      );
    }
    if (name === 'PROMPT_COMMAND') return this.script(known, this.depth + 1);
    if (/^PS/.test(name)) {
      try {
        return this.code(parsePromptText(known, this.budget, this.depth + 1, this.notes));
      } catch (err) {
        if (!(err instanceof ShellSyntaxError)) throw err;
        return deny('unparseable', `${name} could not be parsed (${err.message})`);
      }
    }
    // An exported function: `() { body; }`.
    if (name.startsWith('BASH_FUNC_')) return this.script(`f ${known}`, this.depth + 1);
    return undefined; // BASH_ENV, ENV: a file, like `bash FILE`
  }

  /** An assignment's value as one argument (bash does not split or brace-expand it). */
  private value(word: Word): Arg {
    const fields = this.expand(word);
    if (fields.length === 0) return { text: '', dynamic: false };
    if (fields.length === 1) return fields[0]!;
    return { text: fields.map((f) => f.text).join(' '), dynamic: true };
  }

  private command(cmd: SimpleCommand): Denial | undefined {
    this.budget.step(1 + cmd.words.length + cmd.assignments.length + cmd.redirects.length);
    if (cmd.loop) return this.loop(cmd.loop.name, cmd.loop.values);
    for (const ev of cmd.evaluates) {
      const d = this.evaluate(ev, new Set());
      if (d) return d;
    }
    // Assignments: a standalone one sets a variable later commands may use as a program name.
    for (const a of cmd.assignments) {
      const d = this.assign(a.name, this.value(a.value), cmd.words.length === 0);
      if (d) return d;
    }
    for (const r of cmd.redirects) {
      if (r.heredocWord) this.expand(r.heredocWord); // its $((…)) and ${…} evaluate
      if (
        !/>/.test(r.op) ||
        (r.op === '>&' && r.target && /^\d+$|^-$/.test(plainText(r.target) ?? ''))
      )
        continue;
      for (const target of r.target ? this.expand(r.target) : []) {
        if (DEVICE.test(target.text) || target.text.startsWith('/proc/sysrq-trigger')) {
          return deny(
            'device_write',
            `writing to ${target.text} is blocked: it would destroy a disk or the machine`,
          );
        }
      }
    }
    let argv = cmd.words.flatMap((w) => this.expand(w));
    // a[SUB]=value: an assignment, whose subscript bash expands again and evaluates
    // (`a['$(cmd)']=1` runs cmd).
    while (argv[0] && /^[A-Za-z_][A-Za-z0-9_]*\[.*\]\+?=/s.test(argv[0].text)) {
      const element = argv[0];
      const d =
        this.subscript(element) ?? this.assign(element.text.replace(/\[.*$/s, ''), undefined, true);
      if (d) return d;
      argv = argv.slice(1);
    }
    if (argv.length === 0) return undefined;
    return this.argv(argv, cmd);
  }

  /** `for NAME in WORDS`: NAME takes each known word, or values only known at run time. */
  private loop(name: string, values: Word[] | undefined): Denial | undefined {
    const args = values?.flatMap((w) => this.expand(w));
    const d = this.assign(name, undefined, true);
    if (d) return d;
    if (args && !args.some((a) => a.dynamic)) {
      this.choices.set(
        name,
        args.map((a) => a.text),
      );
    }
    return undefined;
  }

  /** Checks one command line and everything it runs through wrappers. */
  private argv(argv: Arg[], cmd: SimpleCommand | undefined): Denial | undefined {
    let current: Arg[] = argv;
    for (let hops = 0; hops < 16 && current.length > 0; hops++) {
      // Each hop scans the arguments a few times (rules, options, the wrapper's slice).
      this.budget.step(current.length);
      const first = current[0]!;
      const program = baseName(first.text);
      const alias = this.aliases.get(first.text);
      if (alias !== undefined && hops === 0) {
        // With expand_aliases, `e 'cmd'` after `alias e=eval` is `eval 'cmd'`: checked as that
        // line, which a run-time argument would make unknown.
        if (current.some((a) => a.dynamic)) {
          return this.opaque(`the alias ${first.text} is given arguments computed at run time`, {
            argv: current,
          });
        }
        return this.script(`${alias} ${render(current.slice(1))}`, this.depth + 1);
      }
      const allowed = this.allowed(first, current);
      if (allowed) return allowed;
      if (first.nameUnknown) {
        return this.opaque(`the program name "${first.text}…" is computed at run time`, {
          argv: current,
        });
      }
      const denial = blocklist(program, current, cmd);
      if (denial) return denial;
      if ((SHELLS.has(program) || program === 'source' || program === '.') && cmd) {
        const d = this.shellInput(program, current, cmd);
        if (d) return d;
      }
      const b = this.builtin(program, current);
      if (b) return b;
      const u = unwrap(program, current);
      if (!u) return undefined;
      for (const a of u.assignments ?? []) {
        const eq = a.text.indexOf('=');
        const d = this.assign(
          a.text.slice(0, eq),
          { text: a.text.slice(eq + 1), dynamic: a.dynamic },
          false,
        );
        if (d) return d;
      }
      for (const extra of u.extra ?? []) {
        this.budget.command();
        const d = this.argv(extra, undefined);
        if (d) return d;
      }
      if (u.scripts) {
        if (u.scripts.some((s) => s.dynamic)) {
          return this.opaque(`${program} runs a command line computed at run time`, {
            program,
            argv: current,
          });
        }
        return this.script(u.scripts.map((s) => s.text).join(' '), this.depth + 1);
      }
      if (!u.inner) return undefined;
      current = u.inner;
    }
    return undefined;
  }

  /**
   * Builtins that evaluate their operands: subscripts of names (`unset 'a[$(id)]'`, `read`,
   * `declare`), `let` expressions, `declare -i` values, `declare -n` references, and the
   * variables `read`, `mapfile`, `printf -v` set from input.
   */
  private builtin(program: string, argv: Arg[]): Denial | undefined {
    const args = argv.slice(1);
    if (program === 'let') {
      for (const a of args) {
        const d = this.arithmetic(a.text) ?? (a.dynamic ? this.runTimeArithmetic(a) : undefined);
        if (d) return d;
      }
      return undefined;
    }
    if (program === 'test' || program === '[') {
      const i = args.findIndex((a) => a.text === '-v');
      const operand = i === -1 ? undefined : args[i + 1];
      return operand ? this.subscript(operand) : undefined;
    }
    if (program === 'alias') {
      for (const a of args) {
        const eq = a.text.indexOf('=');
        if (eq > 0 && !a.dynamic) this.aliases.set(a.text.slice(0, eq), a.text.slice(eq + 1));
      }
      return undefined;
    }
    if (!NAME_BUILTINS.has(program)) return undefined;
    // printf's format and arguments are only printed; its -v target is a name.
    const names = program === 'printf' ? args.filter((_, i) => args[i - 1]?.text === '-v') : args;
    for (const a of names) {
      const d = this.subscript(a);
      if (d) return d;
    }
    if (DECLARATIONS.has(program)) return this.declaration(args);
    // Names set from input: their values are only known at run time.
    const targets: string[] = [];
    if (program === 'read' || program === 'mapfile' || program === 'readarray') {
      const { index } = skipOptions(argv, 1, program === 'read' ? 'adinNptu' : 'dnOsuCc', []);
      for (const a of argv.slice(index)) targets.push(a.text);
    } else if (program === 'printf' || program === 'wait') {
      const v = args.findIndex((a) => a.text === (program === 'printf' ? '-v' : '-p'));
      if (v !== -1 && args[v + 1]) targets.push(args[v + 1]!.text);
    } else if (program === 'getopts' && args[1]) {
      targets.push(args[1].text);
    }
    for (const t of targets) {
      const name = t.replace(/\[.*$/s, '');
      const d = this.assign(name, undefined, true);
      if (d) return d;
    }
    return undefined;
  }

  /** `NAME[SUBSCRIPT]…`: bash evaluates the subscript as arithmetic. */
  private subscript(arg: Arg): Denial | undefined {
    if (arg.dynamic && !arg.text.includes('=')) return this.runTimeArithmetic(arg);
    if (!/^[A-Za-z_][A-Za-z0-9_]*\[/.test(arg.text)) return undefined;
    const eq = arg.text.indexOf(']=');
    const end = eq === -1 ? arg.text.lastIndexOf(']') : eq;
    if (end === -1) return undefined;
    return this.arithmetic(arg.text.slice(arg.text.indexOf('[') + 1, end));
  }

  /**
   * A name or expression only known at run time, which bash evaluates: allowed, unless the line
   * carries code text in a quoted string that could be it (see evaluate).
   */
  private runTimeArithmetic(arg: Arg): Denial | undefined {
    if (!this.notes.quotedCode) return undefined;
    return this.opaque(
      `"${arg.text}…" is evaluated as a name or arithmetic with a value computed at run time, and the line holds code in a quoted string that value may carry`,
      { argv: [arg] },
    );
  }

  /** export/declare/local/readonly/typeset operands: `NAME=value` sets NAME for the line. */
  private declaration(args: Arg[]): Denial | undefined {
    const flags = args
      .filter((a) => /^[-+][A-Za-z]+$/.test(a.text))
      .map((a) => a.text.slice(1))
      .join('');
    for (const a of args) {
      if (flags.includes('i') && /^[A-Za-z_][A-Za-z0-9_]*$/.test(a.text)) this.integers.add(a.text);
      const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:\[.*?\])?\+?=(.*)$/s.exec(a.text);
      if (!m) continue;
      const [, name, text] = m as unknown as [string, string, string];
      if (flags.includes('n') && (a.dynamic || CODE_VARIABLES.test(text))) {
        // declare -n ref=PS4: every later assignment to ref sets PS4.
        return this.opaque(
          `${name} is made a reference to ${a.dynamic ? 'a variable named at run time' : text}`,
        );
      }
      if (flags.includes('i')) {
        const d = this.arithmetic(text);
        if (d) return d;
      }
      if (text.startsWith('(')) {
        // declare 'a=(…)': the quoted elements are expanded again, their $(…) run.
        const d = this.code(parsePromptText(text, this.budget, this.depth + 1, this.notes));
        if (d) return d;
      }
      const d = this.assign(
        name,
        { text, dynamic: a.dynamic, ...(a.elements ? { elements: a.elements } : {}) },
        true,
      );
      if (d) return d;
      if (flags.includes('i')) this.integers.add(name);
    }
    return undefined;
  }

  /**
   * A shell or `source` reading commands from its input: a here-document or here-string is
   * checked as commands; a pipe, a process substitution or a string built at run time cannot be.
   */
  private shellInput(program: string, argv: Arg[], cmd: SimpleCommand): Denial | undefined {
    const { index, options } = skipOptions(argv, 1, 'oO', []);
    if (SHELLS.has(program) && options.some((o) => /^-[^-]*c/.test(o))) return undefined;
    const file = argv[index];
    const readsStdin =
      file === undefined ||
      file.text === '-' ||
      STDIN_PATHS.test(file.text) ||
      (SHELLS.has(program) && options.some((o) => /^-[^-]*s/.test(o)));
    // /dev/fd/3 and the like: whatever the line opened there, often another command's output.
    const otherFd = file !== undefined && /\/fd\/(?!0$)\d+$/.test(file.text);
    if (file?.process || otherFd || (file && readsStdin && cmd.piped)) {
      return deny(
        'pipe_to_shell',
        `${program} reading commands from another command's output is blocked: the policy cannot see what would run; run the commands directly`,
        { program, argv },
      );
    }
    if (!readsStdin) return undefined;
    for (const r of cmd.redirects) {
      if (r.heredocBody !== undefined) {
        const d = this.script(r.heredocBody, this.depth + 1);
        if (d) return d;
      } else if (r.op === '<<<' && r.target) {
        const input = this.expand(r.target);
        if (input.some((a) => a.dynamic)) {
          return deny(
            'pipe_to_shell',
            `feeding ${program} a command computed at run time is blocked: the policy cannot see what would run`,
            { program, argv },
          );
        }
        const d = this.script(input.map((a) => a.text).join(' '), this.depth + 1);
        if (d) return d;
      }
    }
    return undefined;
  }

  /** Allowlist mode: the program must be listed. */
  private allowed(first: Arg, argv: Arg[]): Denial | undefined {
    if (!this.allow) return undefined;
    // A glob is a computed name too; `[` alone (the test builtin) is not one.
    if (first.dynamic || /[*?]|\[.*\]/.test(first.text)) {
      return deny(
        'dynamic_program',
        `the program name "${first.text}…" is computed at run time, which allowlist mode cannot check`,
        { argv },
      );
    }
    const name = first.text;
    const program =
      name.includes('/') && STANDARD_BIN_DIRS.has(path.posix.dirname(name)) ? baseName(name) : name;
    if (this.allow.has(program) || this.allow.has(name)) return undefined;
    const listed = [...this.allow].sort().join(', ') || '(none)';
    return deny(
      'not_allowed',
      `"${program}" is not an allowed program (policy.shell.allow: ${listed})`,
      { program, argv },
    );
  }

  /**
   * Quote removal and the expansions that can be known: variables set earlier, $IFS, braces.
   * Every field and every character produced is charged to the budget before it is built.
   */
  private expand(word: Word): Arg[] {
    const budget = this.budget;
    type Field = Arg & { plain: boolean; dynamicAt: number };
    const fields: Field[] = [];
    const fresh = (): Field => ({ text: '', dynamic: false, plain: true, dynamicAt: -1 });
    let cur = fresh();
    let started = false;
    /** A part only known at run time; unquoted, its value may split into more fields. */
    const unknown = (quoted: boolean) => {
      cur.dynamic = true;
      cur.plain = false;
      cur.dynamicAt = cur.text.length;
      if (!quoted) cur.nameUnknown = true;
      started = true;
    };
    const split = () => {
      if (started) {
        budget.produce(1, 0);
        fields.push(cur);
      }
      cur = fresh();
      started = false;
    };
    const append = (text: string) => {
      budget.produce(0, text.length);
      cur.text += text;
    };
    /**
     * A number stands in for it: the text around it stays known (`trap "rm /tmp/x.$$" EXIT`
     * is checked as the command it is), and no number is code, a program or a system path.
     */
    const number = () => {
      append('0');
      cur.plain = false;
      started = true;
    };
    for (const p of word.parts) {
      if (p.kind === 'lit') {
        append(p.text);
        started = true;
        if (p.quoted) cur.plain = false;
      } else if (p.kind === 'var') {
        const known = p.name === 'HOME' ? '~' : this.env.get(p.name);
        if (known === undefined && !this.env.has(p.name) && NUMERIC_VARIABLES.has(p.name)) {
          number();
        } else if (known === undefined) {
          if (p.name === 'IFS' && !p.quoted) {
            split(); // ${IFS} between words is a separator
            continue;
          }
          // Unquoted, a value set on the line may split into a command line; the sandbox's
          // own environment does not.
          unknown(p.quoted || !this.env.has(p.name));
        } else if (p.quoted) {
          append(known);
          cur.plain = false;
          started = true;
        } else {
          // Unquoted: the value is split into fields, at the characters of IFS (`IFS=,;
          // x=curl,q; $x` runs curl). An IFS only known at run time could split it anywhere.
          const ifs = this.env.has('IFS') ? this.env.get('IFS') : ' \t\n';
          if (ifs === undefined) {
            unknown(false);
            continue;
          }
          budget.produce(0, known.length);
          const pieces = ifs === '' ? [known] : known.split(new RegExp(`[${escapeRegExp(ifs)}]+`));
          pieces.forEach((piece, i) => {
            if (i > 0) split();
            if (piece !== '') {
              cur.text += piece;
              started = true;
            }
          });
        }
      } else {
        if (p.kind === 'dyn') {
          for (const ev of p.evaluates) {
            const d = this.evaluate(ev, new Set());
            if (d) throw new Refusal(d);
          }
        }
        if (p.kind === 'dyn' && p.numeric) {
          number();
          continue;
        }
        if (p.kind === 'sub' && p.process) cur.process = true;
        if (p.kind === 'dyn' && p.elements) {
          const elements = p.elements.flatMap((w) => this.expand(w));
          if (!elements.some((e) => e.dynamic)) {
            // [i]=value elements: the value is what is evaluated.
            cur.elements = elements.map((e) => e.text.replace(/^\[[^\]]*\]\+?=/, ''));
          }
        }
        unknown(p.quoted);
      }
    }
    split();
    const out: Arg[] = [];
    for (const f of fields) {
      if (f.plain) {
        for (const text of braces(f.text, budget)) out.push({ text, dynamic: false });
        continue;
      }
      const arg: Arg = { text: f.text, dynamic: f.dynamic };
      // "$dir"/run.sh runs run.sh; "$dir"/$x or /bin/"$x" runs who knows what.
      if (f.nameUnknown || (f.dynamicAt !== -1 && f.text.lastIndexOf('/') < f.dynamicAt)) {
        arg.nameUnknown = true;
      }
      if (f.process) arg.process = true;
      if (f.elements) arg.elements = f.elements;
      out.push(arg);
    }
    return out;
  }
}

/** A word split at its brace expressions: literal text, or alternatives (each itself a word). */
type BraceSegment = string | { alternatives: BraceSegment[][] } | { sequence: string[] };

/**
 * Unquoted brace expansion as bash does it: `{rm,-rf,/}` → rm -rf /; `/{etc,usr}` → /etc /usr;
 * `{a,{b,c}}` → a b c; `{1..3}`, `{a..e..2}` sequences. Empty results are dropped.
 *
 * The word is parsed once (braces matched with a stack, so the parse is linear) and the product
 * is built left to right; before each step the size of the next list is computed and charged, so
 * `{,}{,}{,}…` or `{1..999999999}` is refused before anything large is built.
 */
function braces(text: string, budget: Budget): string[] {
  if (!text.includes('{')) return [text];
  // match[i]: index of the } closing the { at i (or -1); commas[i]: its top-level commas.
  const match = new Map<number, number>();
  const commas = new Map<number, number[]>();
  const stack: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '{') {
      stack.push(i);
      budget.nest(stack.length, 'brace expansion');
    } else if (c === '}' && stack.length > 0) {
      match.set(stack.pop()!, i);
    } else if (c === ',' && stack.length > 0) {
      const open = stack.at(-1)!;
      const list = commas.get(open);
      if (list) list.push(i);
      else commas.set(open, [i]);
    }
  }
  const parse = (from: number, to: number): BraceSegment[] => {
    const out: BraceSegment[] = [];
    let literal = from;
    // Groups of two or more choices in a row multiply: 2^groups words at least, so a long row
    // of them is refused while parsing, before the rest of the word is read.
    let doublings = 0;
    for (let i = from; i < to; i++) {
      if (text[i] !== '{') continue;
      const close = match.get(i);
      if (close === undefined || close >= to) continue;
      const cuts = commas.get(i);
      let segment: BraceSegment | undefined;
      if (cuts) {
        const alternatives: BraceSegment[][] = [];
        let a = i + 1;
        for (const cut of [...cuts, close]) {
          alternatives.push(parse(a, cut));
          a = cut + 1;
        }
        segment = { alternatives };
      } else if (close - i - 1 <= MAX_SEQUENCE_CHARS) {
        const sequence = braceSequence(text.slice(i + 1, close), budget);
        if (sequence) segment = { sequence };
      }
      if (!segment) continue; // not an expansion: the brace stays literal text
      if (
        typeof segment !== 'string' &&
        ('alternatives' in segment || segment.sequence.length > 1)
      ) {
        if (2 ** ++doublings > budget.limits.words) budget.produce(2 ** doublings, 0);
      }
      if (i > literal) out.push(text.slice(literal, i));
      out.push(segment);
      i = close;
      literal = close + 1;
    }
    if (to > literal) out.push(text.slice(literal, to));
    return out;
  };
  const expandSegments = (segments: BraceSegment[]): string[] => {
    let results = [''];
    let chars = 0;
    for (const segment of segments) {
      const choices =
        typeof segment === 'string'
          ? [segment]
          : 'sequence' in segment
            ? segment.sequence
            : segment.alternatives.flatMap(expandSegments);
      let choiceChars = 0;
      for (const c of choices) choiceChars += c.length;
      // Charged before it is built: the next list's size and length.
      const count = results.length * choices.length;
      const nextChars = chars * choices.length + choiceChars * results.length;
      budget.produce(count, nextChars);
      const next: string[] = [];
      for (const r of results) for (const c of choices) next.push(r + c);
      results = next;
      chars = nextChars;
    }
    return results;
  };
  const segments = parse(0, text.length);
  // The product's size is known from the parse: a bomb is refused before one word is built.
  const { count, chars } = productSize(segments);
  if (!budget.fits(count, chars)) budget.produce(count, chars);
  return expandSegments(segments).filter((t) => t !== '');
}

/** How many words a parsed word expands to and their total length, without building them. */
function productSize(segments: BraceSegment[]): { count: number; chars: number } {
  let count = 1;
  let chars = 0;
  for (const segment of segments) {
    let c = 0;
    let h = 0;
    if (typeof segment === 'string') {
      c = 1;
      h = segment.length;
    } else if ('sequence' in segment) {
      c = segment.sequence.length;
      for (const v of segment.sequence) h += v.length;
    } else {
      for (const alternative of segment.alternatives) {
        const size = productSize(alternative);
        c += size.count;
        h += size.chars;
      }
    }
    // Each of the `count` words so far is followed by each of the `c` choices.
    chars = chars * c + h * count;
    count *= c;
  }
  return { count, chars };
}

/** `{x..y[..step]}` with integers or single letters → its values (counted first); else undefined. */
function braceSequence(inside: string, budget: Budget): string[] | undefined {
  const numeric = /^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$/.exec(inside);
  const alpha = numeric ? null : /^([A-Za-z])\.\.([A-Za-z])(?:\.\.(-?\d+))?$/.exec(inside);
  const m = numeric ?? alpha;
  if (!m) return undefined;
  const from = numeric ? Number(m[1]) : m[1]!.charCodeAt(0);
  const to = numeric ? Number(m[2]) : m[2]!.charCodeAt(0);
  const step = Math.abs(Number(m[3] ?? 1)) || 1;
  const count = Math.floor(Math.abs(to - from) / step) + 1;
  const width = numeric ? Math.max(m[1]!.length, m[2]!.length) : 1;
  // Refused before one value is made: {1..999999999} is a billion words.
  if (!Number.isSafeInteger(count) || !budget.fits(count, count * width)) {
    throw new TooComplexError('words', `{${inside}} expands to too many words`);
  }
  const padded = numeric && /^-?0\d/.test(m[1]!) ? width : 0;
  const out: string[] = [];
  const dir = to >= from ? step : -step;
  for (let k = 0, v = from; k < count; k++, v += dir) {
    out.push(numeric ? String(v).padStart(padded, '0') : String.fromCharCode(v));
  }
  return out;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Checks on the text itself: fork bombs and /dev/tcp reverse shells survive any quoting. */
function rawChecks(source: string, budget: Budget): Denial | undefined {
  if (/\/dev\/(?:tcp|udp)\//.test(source)) {
    return deny('reverse_shell', 'connections through /dev/tcp or /dev/udp are blocked');
  }
  if (
    /\bfork\s+while\s+fork\b/.test(source) ||
    // No two \s* side by side: adjacent ones backtrack quadratically over a run of spaces.
    /\bwhile\s*(?:\(\s*)?(?:1|true)\s*(?:\)\s*)?(?:[:;{]\s*)?(?:do\s*)?fork\b/.test(source)
  ) {
    return deny('fork_bomb', 'this is a fork bomb: it would exhaust the process table');
  }
  // name() { … name … | or & … }: a function that starts copies of itself.
  const defs =
    /(?:^|[\s;&|(){}])(?:function\s+)?([^\s;&|(){}<>'"`$]+)\s*\(\s*\)\s*\{|(?:^|[\s;&|(){}])function\s+([^\s;&|(){}<>'"`$]+)\s*\{/g;
  for (const m of source.matchAll(defs)) {
    const name = m[1] ?? m[2]!;
    const open = m.index + m[0].length;
    let depth = 1;
    let end = open;
    const limit = Math.min(source.length, open + MAX_FUNCTION_BODY_CHARS);
    budget.step(limit - open);
    while (end < limit && depth > 0) {
      if (source[end] === '{') depth++;
      else if (source[end] === '}') depth--;
      end++;
    }
    const body = source.slice(open, depth === 0 ? end - 1 : end);
    const self = new RegExp(`(?:^|[\\s;&|(){}])${escapeRegExp(name)}(?=$|[\\s;&|(){}])`);
    if (self.test(body) && /\||&/.test(body.replace(/&&/g, ''))) {
      return deny(
        'fork_bomb',
        `"${name}" is a fork bomb: it starts copies of itself until the process table is full`,
      );
    }
  }
  return undefined;
}

/** The blocklist rules for one command (after wrappers are peeled off). */
function blocklist(
  program: string,
  argv: Arg[],
  cmd: SimpleCommand | undefined,
): Denial | undefined {
  const args = argv.slice(1);
  const operands = () => {
    const out: Arg[] = [];
    let options = true;
    for (const a of args) {
      if (options && a.text === '--') {
        options = false;
        continue;
      }
      if (options && a.text.startsWith('-') && a.text !== '-') continue;
      out.push(a);
    }
    return out;
  };
  const hasFlag = (short: RegExp, long: string[]) =>
    args.some(
      (a) => (/^-[^-]/.test(a.text) && short.test(a.text.slice(1))) || long.includes(a.text),
    );
  const extra = { program, argv };

  if (program === 'rm') {
    if (args.some((a) => a.text === '--no-preserve-root')) {
      return deny(
        'rm_root',
        'rm --no-preserve-root is blocked: it exists only to delete the whole filesystem',
        extra,
      );
    }
    const recursive = hasFlag(/[rR]/, ['--recursive']);
    const target = operands().find(isRootish);
    if (recursive && target) {
      return deny(
        'rm_root',
        `"rm -r ${target.text}" would delete the system or home directory; remove specific paths inside ${WORKDIR} instead`,
        extra,
      );
    }
  }
  if (program === 'find') {
    const starts: Arg[] = [];
    for (const a of args) {
      if (/^[-(!]/.test(a.text)) break;
      starts.push(a);
    }
    const deletes =
      args.some((a) => a.text === '-delete') ||
      args.some(
        (a, i) => /^-(exec|execdir)$/.test(a.text) && baseName(args[i + 1]?.text ?? '') === 'rm',
      );
    if (deletes && starts.some(isRootish)) {
      return deny(
        'rm_root',
        'find over the system or home directory with -delete / -exec rm is blocked',
        extra,
      );
    }
  }
  if (program.startsWith('mkfs') || DISK_FORMAT.has(program)) {
    return deny('disk_format', `${program} formats or partitions disks and is blocked`, extra);
  }
  if (
    program === 'dd' &&
    args.some((a) => a.text.startsWith('if=') || DEVICE.test(a.text.replace(/^of=/, '')))
  ) {
    return deny(
      'dd',
      'dd with if= is blocked (raw disk copies); to make a test file use head -c, truncate -s or fallocate',
      extra,
    );
  }
  if (['chmod', 'chown', 'chgrp', 'chattr', 'setfacl'].includes(program)) {
    const target = operands().find(isRootish);
    if (target) {
      return deny(
        'chmod_root',
        `${program} on ${target.text} is blocked: it would break the system's permissions`,
        extra,
      );
    }
  }
  if (program === 'mv') {
    const sources = operands().slice(0, -1);
    const target = sources.find(isRootish);
    if (target) return deny('mv_root', `moving ${target.text} is blocked`, extra);
  }
  if (DOWNLOADERS.has(program)) {
    return deny(
      'download',
      `${program} is blocked in run_shell (the sandbox has no network); use the http_get or http_post tool instead`,
      extra,
    );
  }
  if (NETCATS.has(program)) {
    return deny(
      'netcat',
      `${program} is blocked: network listeners and reverse shells are not allowed`,
      extra,
    );
  }
  if (
    POWER.has(program) ||
    (program === 'init' && /^[0126sS]$/.test(args[0]?.text ?? '')) ||
    (program === 'systemctl' && args.some((a) => SYSTEMCTL_POWER.has(a.text)))
  ) {
    return deny('power', `${program} would stop or restart the machine and is blocked`, extra);
  }
  if (program === 'killall5') return deny('kill_all', 'killall5 would kill every process', extra);
  if (program === 'kill' || program === 'pkill') {
    let i = 0;
    if (args[0] && /^-(s|n)$/.test(args[0].text)) i = 2;
    else if (args[0] && /^-/.test(args[0].text) && args[0].text !== '--') i = 1;
    if (args[i]?.text === '--') i++;
    if (program === 'kill' && args.slice(i).some((a) => a.text === '-1' || a.text === '1')) {
      return deny('kill_all', 'kill -1 / kill 1 would kill every process or init', extra);
    }
  }
  if (DEVICE_WRITERS.has(program) && program !== 'cat') {
    const dev = operands().find((a) => DEVICE.test(a.text));
    if (dev)
      return deny(
        'device_write',
        `${program} on ${dev.text} is blocked: it would destroy a disk`,
        extra,
      );
  }
  if (SHELLS.has(program) && cmd) {
    const { index, options } = skipOptions(argv, 1, 'oO', []);
    const hasC = options.some((o) => /^-[^-]*c/.test(o));
    const readsStdin = !hasC && (index >= argv.length || options.some((o) => /^-[^-]*s/.test(o)));
    if (readsStdin && cmd.piped) {
      return deny(
        'pipe_to_shell',
        `piping commands into ${program} is blocked: the policy cannot see what would run; run the commands directly`,
        extra,
      );
    }
  }
  return undefined;
}
