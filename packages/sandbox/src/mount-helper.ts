/**
 * One long-lived bash that runs the host's `mount --bind` and `umount -l` for the docker
 * driver's slots (mounts.ts). Spawning them from the worker forks the whole Node process each
 * time, on its event loop — measured at 2–10 ms of the worker's CPU per spawn, two per warm
 * call with a workspace (bind, then unmount) — while a small shell forks in well under one.
 * Same programs, same arguments: only who forks them changes.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';

/**
 * Reads NUL-terminated requests (operation, first path, second path) and answers each with one
 * line "<status> <output>", in order. Paths travel NUL-terminated, so any byte but NUL is fine.
 */
const SCRIPT = `
while IFS= read -r -d '' op && IFS= read -r -d '' a && IFS= read -r -d '' b; do
  case "$op" in
    bind) out=$(mount --bind -- "$a" "$b" 2>&1) ;;
    umount) out=$(umount -l -- "$a" 2>&1) ;;
    *) out="unknown operation"; false ;;
  esac
  status=$?
  printf '%d %s\\n' "$status" "\${out//$'\\n'/ }"
done
`;

interface Pending {
  what: string;
  resolve: () => void;
  reject: (err: Error) => void;
}

type Child = ChildProcessByStdio<Writable, Readable, null>;

/** One running shell and the requests it owes answers to, in order. */
interface Shell {
  child: Child;
  pending: Pending[];
  buffered: string;
}

export class MountHelper {
  private shell: Shell | undefined;

  /** `mount --bind -- source target`. */
  bind(source: string, target: string): Promise<void> {
    return this.request('bind', source, target, `mount --bind ${source} ${target}`);
  }

  /** `umount -l -- target`. */
  unmount(target: string): Promise<void> {
    return this.request('umount', target, '', `umount -l ${target}`);
  }

  /** Ends the shell once it has answered what it owes; a later request starts a new one. */
  close(): void {
    this.shell?.child.stdin.end();
    this.shell = undefined;
  }

  private request(op: string, a: string, b: string, what: string): Promise<void> {
    if (a.includes('\0') || b.includes('\0'))
      return Promise.reject(new Error(`${what}: a path cannot contain NUL`));
    const shell = this.shell ?? this.start();
    return new Promise<void>((resolve, reject) => {
      shell.pending.push({ what, resolve, reject });
      // Held open only while it owes an answer: an idle helper never keeps a process alive.
      if (shell.pending.length === 1) hold(shell.child, true);
      shell.child.stdin.write(`${op}\0${a}\0${b}\0`);
    });
  }

  private start(): Shell {
    const child = spawn('bash', ['--noprofile', '--norc', '-c', SCRIPT], {
      stdio: ['pipe', 'pipe', 'ignore'],
    });
    const shell: Shell = { child, pending: [], buffered: '' };
    this.shell = shell;
    // Listeners first: a spawn failure (no bash) arrives as 'error', then fails what waits.
    child.stdin.on('error', () => undefined);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (text: string) => answer(shell, text));
    const gone = (why: string) => {
      if (this.shell === shell) this.shell = undefined;
      for (const p of shell.pending.splice(0)) p.reject(new Error(`${p.what}: ${why}`));
    };
    child.on('error', (err) => gone(`mount helper failed: ${err.message}`));
    child.on('exit', (code, signal) => gone(`mount helper exited (${signal ?? code})`));
    hold(child, false);
    return shell;
  }
}

function answer(shell: Shell, text: string): void {
  shell.buffered += text;
  let nl: number;
  while ((nl = shell.buffered.indexOf('\n')) >= 0) {
    const line = shell.buffered.slice(0, nl);
    shell.buffered = shell.buffered.slice(nl + 1);
    const p = shell.pending.shift();
    if (!p) continue;
    const space = line.indexOf(' ');
    const status = Number(line.slice(0, space));
    if (status === 0) p.resolve();
    else p.reject(new Error(`${p.what} failed (status ${status}): ${line.slice(space + 1)}`));
  }
  if (shell.pending.length === 0) hold(shell.child, false);
}

function hold(child: Child, held: boolean): void {
  for (const handle of [child, child.stdin, child.stdout] as { ref(): void; unref(): void }[])
    if (held) handle.ref();
    else handle.unref();
}
