/**
 * Issue 11 item 8: workers starting together on one host must not break the shared slots mount
 * the docker warm pool binds workspaces through. Real processes, real mounts, real Docker.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { ROOT } from '../support/process.js';

const exec = promisify(execFile);
const reason = process.getuid?.() !== 0 ? 'not root' : await whyDriverUnavailable('docker');
if (reason) console.warn(`mount setup suite: skipped, ${reason}`);

interface Run {
  kill(): void;
  done: Promise<{ ok: boolean; warm?: boolean; error?: string; output: string }>;
  output(): string;
}

function startWorker(dir: string, name: string): Run {
  const child = spawn(
    process.execPath,
    [
      '--conditions=@toolgate/source',
      '--import',
      'tsx',
      'test/sandbox/fixtures/race-worker.ts',
      dir,
      name,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '' } },
  );
  let text = '';
  child.stdout.on('data', (b: Buffer) => (text += b.toString()));
  child.stderr.on('data', (b: Buffer) => (text += b.toString()));
  const done = new Promise<{ ok: boolean; warm?: boolean; error?: string; output: string }>(
    (resolve) =>
      child.once('exit', () => {
        const line = /RESULT (.*)/.exec(text)?.[1];
        resolve({ ...(line ? JSON.parse(line) : { ok: false, error: 'no result' }), output: text });
      }),
  );
  return { kill: () => child.kill('SIGKILL'), done, output: () => text };
}

/** Mount points at or below dir, deepest first. */
async function mountsBelow(dir: string): Promise<string[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  return text
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((t) => t === dir || t.startsWith(dir + '/'))
    .sort((a, b) => b.length - a.length);
}

describe.skipIf(reason !== undefined)('mount setup across worker processes (docker)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-mounts-'));
  });
  afterAll(async () => {
    for (let i = 0; i < 5; i++)
      for (const t of await mountsBelow(dir)) await exec('umount', ['-l', t]).catch(() => 0);
    await rm(dir, { recursive: true, force: true });
  });

  it('repairs a broken stack of slots mounts left from before, so warm workspace calls work', async () => {
    // What two workers racing used to leave: a private bind under a shared one on slots.
    const slots = path.join(dir, 'broken/state/slots');
    await mkdir(slots, { recursive: true });
    await exec('mount', ['--bind', slots, slots]);
    await exec('mount', ['--make-private', slots]);
    await exec('mount', ['--bind', slots, slots]);
    await exec('mount', ['--make-rshared', slots]);
    expect((await mountsBelow(slots)).length).toBe(2);

    const r = await startWorker(path.join(dir, 'broken'), 'repair').done;
    expect(r, r.output).toMatchObject({ ok: true, warm: true });
  }, 120_000);

  it('three workers started at once, one killed -9 during setup and restarted: every one writes a file', async () => {
    const base = path.join(dir, 'race');
    const runs = ['w1', 'w2', 'w3'].map((n) => startWorker(base, n));
    // Killed while it is setting up (mounts, host lock, warm pool).
    await new Promise((r) => setTimeout(r, 700));
    runs[2]!.kill();
    await runs[2]!.done;
    const again = startWorker(base, 'w3');
    const results = await Promise.all([runs[0]!.done, runs[1]!.done, again.done]);
    for (const r of results) expect(r, r.output).toMatchObject({ ok: true, warm: true });
    // One shared mount on slots, as Docker needs.
    const slots = path.join(base, 'state/slots');
    const text = await readFile('/proc/self/mountinfo', 'utf8');
    const own = text.split('\n').filter((l) => l.split(' ')[4] === slots);
    expect(own.length).toBeLessThanOrEqual(1);
    if (own.length === 1) expect(own[0]).toMatch(/shared:/);
  }, 180_000);
});
