/**
 * A lock shared by every worker process on one host, for the mount changes that must not
 * interleave (the shared slots mount, workspace loop mounts). It is an flock(2) on a file,
 * taken by util-linux `flock` in a child process because Node has no flock: the kernel drops
 * it when that child dies, so a worker killed with -9 mid-setup never leaves the host locked.
 */
import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';

/** Longest wait for the lock; a holder only ever runs a few mount commands. */
const WAIT_SECONDS = 60;

export class HostLock {
  /** Serializes this process's own holders: flock is per open file, and each child opens its own. */
  private tail: Promise<unknown> = Promise.resolve();

  constructor(readonly file: string) {}

  /** Runs fn while holding the lock (exclusive across processes and within this one). */
  with<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.tail.then(
      () => this.hold(fn),
      () => this.hold(fn),
    );
    this.tail = next.catch(() => undefined);
    return next;
  }

  private async hold<T>(fn: () => Promise<T>): Promise<T> {
    await mkdir(path.dirname(this.file), { recursive: true, mode: 0o755 });
    // The child holds the lock until its stdin closes: at release, or when this process dies.
    const child = spawn(
      'flock',
      ['-w', String(WAIT_SECONDS), this.file, 'sh', '-c', 'echo locked; exec cat >/dev/null'],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const exited = new Promise<number | null>((resolve) => {
      child.once('error', () => resolve(127));
      child.once('exit', (code) => resolve(code));
    });
    let err = '';
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    const locked = await new Promise<boolean>((resolve) => {
      child.stdout.on('data', (b: Buffer) => {
        if (b.toString().includes('locked')) resolve(true);
      });
      void exited.then(() => resolve(false));
    });
    if (!locked) {
      throw new Error(`could not take the host lock ${this.file}: ${err.trim() || 'flock failed'}`);
    }
    try {
      return await fn();
    } finally {
      child.stdin.end();
      await exited;
    }
  }
}
