/**
 * `toolgate completion bash|zsh|fish` and the hidden `toolgate __complete <words…>` the scripts
 * call, the way cobra (kubectl, gh) does it: the scripts are thin, the command itself knows its
 * commands, flags and — from the gateway — tool names, so a new command completes without a
 * new script. Only the first word is written into the script (no process start for the most
 * common completion); the scripts are meant to be sourced from the shell's rc file
 * (`source <(toolgate completion bash)`), so that list is as new as the shell.
 */
import type { ParseArgsOptionsConfig } from 'node:util';
import { UsageError, type CliIo, type Command, type Parsed } from '../command.js';
import { GATEWAY_OPTIONS, gatewayOf } from '../remote/index.js';

const SHELLS = ['bash', 'zsh', 'fish'] as const;
type Shell = (typeof SHELLS)[number];

/** Values some flags take, offered after the flag. */
const FLAG_VALUES: Record<string, readonly string[]> = { output: ['table', 'json', 'yaml'] };

/** How long `toolgate call <TAB>` waits for the gateway's tool list: a shell must not hang. */
export const TOOL_LIST_TIMEOUT_MS = 1500;

export interface Candidate {
  value: string;
  description?: string;
}

/** The first words: each command, or a group (`secrets`) with its subcommands named. */
export function firstWords(commands: readonly Command[]): Candidate[] {
  const byWord = new Map<string, Command[]>();
  for (const c of commands) {
    const word = c.name.split(' ')[0]!;
    byWord.set(word, [...(byWord.get(word) ?? []), c]);
  }
  return [...byWord].map(([word, group]) => {
    const self = group.find((c) => c.name === word);
    return {
      value: word,
      description:
        self?.summary ??
        group.map((c) => c.name.split(' ').slice(1).join(' ')).join(', ') + ' (subcommands)',
    };
  });
}

function flagsOf(options: ParseArgsOptionsConfig = {}): Candidate[] {
  return [
    ...Object.entries(options).map(([name, o]) => ({
      value: `--${name}`,
      description: o.short ? `-${o.short}` : undefined,
    })),
    { value: '--help' },
  ];
}

/** The option a flag word names (`--output`, `-o`), if it takes a value given in the next word. */
function valueFlag(word: string, options: ParseArgsOptionsConfig = {}): string | undefined {
  if (word.includes('=')) return undefined;
  const entry = Object.entries(options).find(
    ([name, o]) => word === `--${name}` || (o.short !== undefined && word === `-${o.short}`),
  );
  return entry && entry[1].type === 'string' ? entry[0] : undefined;
}

/**
 * The candidates for the last of `words` (the words after `toolgate`; the last is the one being
 * typed, possibly ''), filtered by what is typed so far.
 */
export async function completions(
  commands: readonly Command[],
  words: readonly string[],
  io: CliIo,
): Promise<Candidate[]> {
  const current = words.at(-1) ?? '';
  const before = words.slice(0, -1);
  const typed = (list: Candidate[]) => list.filter((c) => c.value.startsWith(current));

  // The longest command whose words all precede the cursor.
  const command = [...commands]
    .sort((a, b) => b.name.length - a.name.length)
    .find((c) => c.name.split(' ').every((w, i) => before[i] === w));
  const depth = command ? command.name.split(' ').length : 0;

  // Only command words typed so far (`secrets <TAB>`, `upstreams <TAB>`): the next ones.
  const names = commands.map((c) => c.name.split(' '));
  const extending = names.filter(
    (w) => w.length > before.length && before.every((b, i) => w[i] === b),
  );
  if (before.length === 0) return typed(firstWords(commands));
  if (extending.length > 0 && !current.startsWith('-')) {
    const next = [...new Set(extending.map((w) => w[before.length]!))];
    return typed(
      next.map((value) => ({
        value,
        description: commands.find((c) => c.name === [...before, value].join(' '))?.summary,
      })),
    );
  }
  if (!command) return [];

  const rest = before.slice(depth);
  // The connection flags take a value whether or not the command lists them yet.
  const options = { ...GATEWAY_OPTIONS, ...command.options };
  const flag = rest.length > 0 ? valueFlag(rest.at(-1)!, options) : undefined;
  if (flag) return typed((FLAG_VALUES[flag] ?? []).map((value) => ({ value })));
  if (current.startsWith('-')) return typed(flagsOf(command.options));

  // Which positional argument the cursor is on.
  let positional = 0;
  for (let i = 0; i < rest.length; i++) {
    const w = rest[i]!;
    if (!w.startsWith('-')) positional++;
    else if (valueFlag(w, options)) i++;
  }
  if (command.name === 'completion' && positional === 0)
    return typed(SHELLS.map((value) => ({ value })));
  if (command.name === 'call' && positional === 0) return typed(await toolNames(rest, io));
  return [];
}

/** The tools the key may call, from the gateway's GET /tools; nothing without a key or an answer. */
async function toolNames(rest: readonly string[], io: CliIo): Promise<Candidate[]> {
  // The connection flags typed so far count (`toolgate call --gateway URL <TAB>`), whichever
  // flags `call` itself takes.
  const values: Parsed['values'] = {};
  for (let i = 0; i < rest.length; i++) {
    const eq = /^--(gateway|url|key)=(.*)$/.exec(rest[i]!);
    const flag = /^--(gateway|url|key)$/.exec(rest[i]!);
    if (eq) values[eq[1]!] = eq[2];
    else if (flag) values[flag[1]!] = rest[++i];
  }
  const { url, key, headers } = gatewayOf({ values, positionals: [] }, io);
  if (!key) return [];
  try {
    const res = await fetch(`${url}/tools`, {
      headers,
      signal: AbortSignal.timeout(TOOL_LIST_TIMEOUT_MS),
    });
    if (!res.ok) return [];
    const tools = (await res.json()) as { name: string; description?: string }[];
    return tools.map((t) => ({
      value: t.name,
      description: t.description?.split('\n')[0]?.replace(/\t/g, ' ').slice(0, 80),
    }));
  } catch {
    return []; // a shell completing must stay quiet
  }
}

/** Single-quoted for sh/bash/zsh/fish (fish also reads `\'` inside single quotes). */
const quote = (text: string, shell: Shell) =>
  shell === 'fish'
    ? `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`
    : `'${text.replace(/'/g, `'\\''`)}'`;

export function completionScript(shell: Shell, commands: readonly Command[]): string {
  const first = firstWords(commands);
  if (shell === 'bash')
    return `# toolgate completion for bash: source <(toolgate completion bash)
_toolgate() {
  local cur=\${COMP_WORDS[COMP_CWORD]} IFS=$'\\n'
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W ${quote(first.map((c) => c.value).join('\n'), shell)} -- "$cur"))
  else
    COMPREPLY=($(toolgate __complete "\${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null | cut -f1))
  fi
}
complete -o default -F _toolgate toolgate
`;
  if (shell === 'zsh')
    return `#compdef toolgate
# toolgate completion for zsh: source <(toolgate completion zsh)
_toolgate() {
  local -a described
  local line
  if (( CURRENT == 2 )); then
    described=(
${first.map((c) => `      ${quote(`${c.value}:${c.description ?? ''}`, shell)}`).join('\n')}
    )
  else
    for line in "\${(@f)$(toolgate __complete "\${(@)words[2,CURRENT]}" 2>/dev/null)}"; do
      [[ -z $line ]] && continue
      if [[ $line == *$'\\t'* ]]; then
        described+=("\${\${line%%$'\\t'*}//:/\\\\:}:\${line#*$'\\t'}")
      else
        described+=("\${line//:/\\\\:}")
      fi
    done
  fi
  if (( \${#described} )); then
    _describe toolgate described
  else
    _files
  fi
}
compdef _toolgate toolgate
`;
  return `# toolgate completion for fish: toolgate completion fish | source
function __toolgate_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l found (toolgate __complete $words[2..-1] "$cur" 2>/dev/null)
    if test (count $found) -gt 0
        printf '%s\\n' $found
    else
        __fish_complete_path "$cur"
    end
end
complete -c toolgate -f
${first
  .map(
    (c) =>
      `complete -c toolgate -n __fish_use_subcommand -a ${quote(c.value, shell)} -d ${quote(c.description ?? '', shell)}`,
  )
  .join('\n')}
complete -c toolgate -n 'not __fish_use_subcommand' -a '(__toolgate_complete)'
`;
}

/** `toolgate __complete <words…>`: one candidate a line, `value<TAB>description`. */
export async function runComplete(
  commands: readonly Command[],
  words: readonly string[],
  io: CliIo,
): Promise<number> {
  const found = await completions(commands, words.length > 0 ? words : [''], io);
  if (found.length > 0)
    io.out(
      `${found.map((c) => (c.description ? `${c.value}\t${c.description}` : c.value)).join('\n')}\n`,
    );
  return 0;
}

/** The `completion` command over the command list (given late: the list includes it). */
export function completionCommand(commands: () => readonly Command[]): Command {
  return {
    name: 'completion',
    summary: 'a shell completion script: toolgate completion bash|zsh|fish',
    help: `usage: toolgate completion <bash|zsh|fish>

  Prints a script that completes toolgate's commands, their flags, -o values and, for
  \`toolgate call <TAB>\`, the tools the gateway offers your key (GET /tools, only when a key is
  set, ${TOOL_LIST_TIMEOUT_MS / 1000} s at most, silent on failure). Load it from your shell's rc file:

    bash:  source <(toolgate completion bash)          (~/.bashrc)
    zsh:   source <(toolgate completion zsh)           (~/.zshrc, after compinit)
    fish:  toolgate completion fish | source           (~/.config/fish/config.fish)

  The script asks \`toolgate __complete <words…>\` for everything after the first word.

Exit codes: 0 printed, 2 bad usage (no shell or an unknown one).
`,
    args: { min: 1, max: 1 },
    run(parsed: Parsed, io: CliIo) {
      const shell = parsed.positionals[0] as Shell;
      if (!SHELLS.includes(shell))
        throw new UsageError(`toolgate completion: unknown shell "${shell}" (bash, zsh or fish)`);
      io.out(completionScript(shell, commands()));
      return Promise.resolve(0);
    },
  };
}
