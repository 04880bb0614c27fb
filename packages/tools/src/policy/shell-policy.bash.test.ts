/**
 * The policy against real bash: each form below is run by the host's bash with a stand-in
 * `curl` first on PATH (a script that only appends to a marker file), so the test sees whether
 * bash really runs the hidden program. Whenever it does, the policy must refuse the line in both
 * modes. A form a given bash version does not run proves nothing either way, so the forms are
 * written to run on bash 5.x; the issue's three reported forms must run here, or the test is
 * not testing anything.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkShellCommand, type ShellPolicy } from './index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tg-shell-policy-'));
const marker = path.join(dir, 'ran');
mkdirBin();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function mkdirBin(): void {
  const bin = path.join(dir, 'bin');
  spawnSync('mkdir', ['-p', bin]);
  writeFileSync(path.join(bin, 'curl'), `#!/bin/sh\necho ran >> '${marker}'\necho 1\n`);
  chmodSync(path.join(bin, 'curl'), 0o755);
}

/** Whether bash runs the stand-in curl when given `command`. */
function bashRuns(command: string): boolean {
  rmSync(marker, { force: true });
  spawnSync('bash', ['-c', command], {
    cwd: dir,
    env: { PATH: `${path.join(dir, 'bin')}:/usr/bin:/bin`, HOME: dir },
    stdio: 'ignore',
    // Generous: a loaded machine must not turn "ran" into "did not run" (a skipped row).
    timeout: 20_000,
  });
  return existsSync(marker);
}

const blocklist: ShellPolicy = { mode: 'blocklist', allow: [] };
const allowlist: ShellPolicy = {
  mode: 'allowlist',
  allow: [
    ...['echo', 'cat', 'bash', 'sh', ':', 'true', 'false', 'ls', 'printf', 'read', 'set'],
    ...['shopt', 'f', 'g', 'h', 'q', 'eval', 'trap', 'source', '.', 'let', 'unset', 'declare'],
    ...['export', 'typeset', 'readonly', 'local', 'test', '[', 'mapfile', 'compgen', 'hash'],
    ...['env', 'xargs', 'find', 'command', 'builtin', 'exec', 'nice', 'timeout', 'getopts'],
  ],
};

/** `@@` stands for the hidden command. */
const hidden = 'curl q';
const forms = [
  // The issue's three.
  'echo ${v:-$(@@)}',
  'echo $(( $(@@) + 1 ))',
  "trap '@@' EXIT; true",
  // ${…} operands, quoting inside them, nesting.
  'echo "${v:-$(@@)}"',
  'echo ${v:=$(@@)}',
  'v=abc; echo ${v#$(@@)}',
  'v=abc; echo ${v:0:$(@@)}',
  'v=x; echo ${v//x/$(@@)}',
  'v=x; echo ${v^^$(@@)}',
  'echo ${a[$(@@)]}',
  'echo ${!a[$(@@)]}',
  'echo ${v[@]:-$(@@)}',
  'echo ${1:-$(@@)}',
  'echo ${v:-"$(@@)"}',
  'echo "${v:-"$(@@)"}"',
  'echo "${v:-\'$(@@)\'}"',
  "echo ${v:-'}'}$(@@)",
  'echo ${v:-\\}$(@@)}',
  'echo ${v:-#}$(@@)',
  'echo ${v:-$(echo })}$(@@)',
  'echo ${v:-`echo }`}$(@@)',
  'echo ${v:-$(( $(@@) ))}',
  'echo ${v:-$(echo "}")}$(@@)',
  'echo $(echo ${v:-)})$(@@)',
  'echo ${v:-\\\\$(@@)}',
  "cat <<'E'\n$(@@)\nE\n@@",
  // Arithmetic.
  'echo $[ $(@@) ]',
  'echo $[ ${v:-$(@@)} ]',
  '(( $(@@) ))',
  '(( x = $(@@) ))',
  'for ((i=$(@@);0;)); do :; done',
  'echo $((1+`@@`))',
  'echo $(( a[$(@@)] ))',
  'echo $(( (1) ))$(@@)',
  "[[ 1 -eq 'a[$(@@)]' ]]",
  // Values bash evaluates.
  "x='a[$(@@)]'; echo $((x))",
  "x='a[$(@@)]'; (( x ))",
  "x='a[$(@@)]'; if (( x )); then :; fi",
  "x='a[$(@@)]'; while (( x )); do break; done",
  "x='a[$(@@)]'; ! (( x ))",
  "x='a[$(@@)]'; [[ x -eq 1 ]]",
  "x='a[$(@@)]'; let x",
  "x='a[$(@@)]'; [[ $x -eq 1 ]]",
  "x='a[$(@@)]'; echo ${a[x]}",
  "x='a[$(@@)]'; echo ${!x}",
  "x='a[$(@@)]'; y=x; echo $((y))",
  "x='a[$(@@)]'; declare -i y; y=x",
  "for x in 1 'a[$(@@)]'; do echo $((x)); done",
  "arr=('a[$(@@)]'); echo $((arr))",
  "arr=(1 'a[$(@@)]'); echo $((arr[1]))",
  "export x='a[$(@@)]'; echo $((x))",
  "f() { local x='a[$(@@)]'; echo $((x)); }; f",
  "y='$(@@)'; echo ${y@P}",
  "PS4='$(@@)'; set -x; :",
  // Subscripts of names.
  "unset 'a[$(@@)]'",
  "[ -v 'a[$(@@)]' ]",
  "[[ -v 'a[$(@@)]' ]]",
  "test -v 'a[$(@@)]'",
  "let 'y=a[$(@@)]'",
  "declare -i n='a[$(@@)]'",
  "declare 'a[$(@@)]=1'",
  "printf -v 'a[$(@@)]' x",
  "read 'a[$(@@)]' <<< x",
  "a['$(@@)']=1",
  // Handlers and strings run as code.
  "trap '@@' DEBUG; :",
  "trap '@@' ERR; false",
  'trap -- "@@" EXIT',
  "eval '@@'",
  "bash -c '@@'",
  'env -S "@@"',
  "shopt -s expand_aliases; alias g='@@'\ng",
  "shopt -s expand_aliases; alias e=eval\ne '@@'",
  "shopt -s expand_aliases; alias s='bash -c'\ns '@@'",
  "shopt -s expand_aliases; alias n='nice '; alias c=curl\nn c q",
  "IFS=,; x='curl,q'; $x",
  "mapfile -C '@@' -c 1 arr <<< a",
  "compgen -C '@@' w",
  "env 'BASH_FUNC_f%%=() { @@; }' bash -c f",
  'hash -p bin/curl ls; ls',
  "declare -a 'b=($(@@))'",
  '. /dev/stdin <<< "@@"',
  'bash <<< "@@"',
  // Nesting, here-documents, process substitution, compound commands.
  'echo `echo \\`@@\\``',
  'cat <<E\n${v:-$(@@)}\nE',
  'cat <<E\n$(( $(@@) ))\nE',
  'cat <<E ${v:-$(@@)}\nE',
  'cat <(@@)',
  'coproc X { @@; }; wait',
  'a=( $(@@) )',
  'a=([$(@@)]=1)',
  'a+=( $(@@) )',
  'case a in $(@@)) :;; esac',
  'echo $(case x in x) @@;; esac)',
  'select x in $(@@); do break; done </dev/null',
  'declare x=$(@@)',
  'f() ( @@ ); f',
  'function h { @@; }; h',
  "a=(1 2 ')' ); @@",
  // Code only known at run time.
  'eval "$(printf \'cu%sl q\' r)"',
  'P=$(printf cu; printf rl); $P q',
  'echo @@ | bash',
  'source <(echo @@)',
  'bash /dev/fd/3 3< <(echo @@)',
  'echo @@ | xargs -I{} bash -c {}',
  'find bin -name curl -exec {} q \\;',
  "read -r PS4 <<< '$(@@)'; set -x; :",
  "read x <<< 'a[$(@@)]'; echo $((x))",
  'read y <<< \'a[$(@@)]\'; let "$y"',
  'read y <<< \'a[$(@@)]\'; [ -v "$y" ]',
  "printf -v x '%s' 'a[$(@@)]'; echo $((x))",
  "x=$(echo 'a[$(@@)]'); echo $((x))",
  "x=$(printf 'a[\\44(@@)]'); echo $((x))",
  "declare -n r=PS4; r='$(@@)'; set -x; :",
  'BASH_ENV=<(echo @@) bash -c :',
].map((f) => f.replaceAll('@@', hidden));

/** Look-alikes: the program's name is there, but bash does not run it. */
const lookAlikes = [
  "echo ${v:-'$(@@)'}",
  'echo ${v:-\\$(@@)}',
  'echo "${v:-\\$(@@)}"',
  'cat <<\\E\n$(@@)\nE',
  "cat <<'E'\n$(@@)\nE",
  "echo '$(@@)'",
  'echo "\\$(@@)"',
  "trap - EXIT; echo '@@'",
  'x=\'$(@@)\'; echo "$x"',
].map((f) => f.replaceAll('@@', hidden));

describe('every form real bash runs a hidden program in is refused', () => {
  it('the reported forms do run the program in this bash', () => {
    for (const command of forms.slice(0, 3)) expect(bashRuns(command), command).toBe(true);
  });

  it('most forms run the program in this bash (else the table tests nothing)', () => {
    const ran = forms.filter(bashRuns).length;
    expect(ran).toBeGreaterThan(forms.length * 0.8);
  }, 120_000);

  it.each(lookAlikes)('look-alike %j: bash does not run it and both modes allow it', (command) => {
    expect(bashRuns(command)).toBe(false);
    expect(checkShellCommand(command, blocklist)).toEqual({ ok: true });
    expect(checkShellCommand(command, allowlist)).toEqual({ ok: true });
  });

  it.each(forms)('%j', (command) => {
    if (!bashRuns(command)) return; // this bash does not run it: nothing to refuse
    for (const policy of [blocklist, allowlist]) {
      expect(checkShellCommand(command, policy), `${policy.mode}: ${command}`).toMatchObject({
        ok: false,
      });
    }
  });
});
