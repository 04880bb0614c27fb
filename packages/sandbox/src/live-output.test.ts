/**
 * Live output (RunRequest.onOutput) and cancellation (RunRequest.signal) on both drivers, for
 * real: chunks arrive while the program runs, and an aborted call leaves no process and no
 * container behind within 2 s. The measured times are printed.
 */
import { chmod, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_OWNER, type DockerDriver } from './docker.js';
import { createSandbox, type Sandbox } from './index.js';
import { testSandboxConfig, whyDriverUnavailable } from './testing.js';
import type { OutputStream, RunRequest, RunResult } from './types.js';

const drivers = ['docker', 'bwrap'] as const;
const reasons = Object.fromEntries(
  await Promise.all(drivers.map(async (d) => [d, await whyDriverUnavailable(d)] as const)),
);
for (const d of drivers)
  if (reasons[d]) console.warn(`live output suite: ${d} skipped: ${reasons[d]}`);

/** Host pids whose command line contains the marker (sandboxed processes are host processes too). */
async function processesWith(marker: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes(marker)) found.push(Number(entry));
  }
  return found;
}

interface Chunk {
  stream: OutputStream;
  text: string;
  at: number;
  /** run() had not settled yet when this chunk arrived. */
  pending: boolean;
}

/** Runs a request recording every live chunk, when it came and whether run() was still pending. */
async function record(
  sandbox: Sandbox,
  request: RunRequest,
): Promise<{ result: RunResult; chunks: Chunk[]; t0: number; t1: number }> {
  const chunks: Chunk[] = [];
  let pending = true;
  const t0 = performance.now();
  try {
    const result = await sandbox.run({
      ...request,
      onOutput: (stream, text) => chunks.push({ stream, text, at: performance.now(), pending }),
    });
    return { result, chunks, t0, t1: performance.now() };
  } finally {
    pending = false;
  }
}

const joined = (chunks: Chunk[], stream: OutputStream) =>
  chunks
    .filter((c) => c.stream === stream)
    .map((c) => c.text)
    .join('');

describe.each(drivers)('live output and cancellation: %s driver', (driver) => {
  const skip = reasons[driver] !== undefined;
  let dir: string;
  let sandbox: Sandbox;

  beforeAll(async () => {
    if (skip) return;
    dir = await mkdtemp(path.join(tmpdir(), `tg-live-${driver}-`));
    await chmod(dir, 0o711);
    sandbox = await createSandbox(testSandboxConfig(driver, dir, { pool: { size: 1 } }));
    await sandbox.warmUp();
  });
  afterAll(async () => {
    if (skip) return;
    await sandbox.close();
    await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(skip)('delivers output while the program still runs', async () => {
    await sandbox.warmUp();
    const { result, chunks, t0, t1 } = await record(sandbox, {
      image: 'shell',
      argv: ['bash', '-c', 'echo first; sleep 1; echo second'],
    });
    expect(result.stdout).toBe('first\nsecond\n');
    const first = chunks[0]!;
    expect(first).toMatchObject({ stream: 'stdout', text: 'first\n', pending: true });
    // Before the sleep ended, not flushed at the exit.
    expect(t1 - first.at).toBeGreaterThan(800);
    expect(joined(chunks, 'stdout')).toBe(result.stdout);
    console.warn(
      `[live-output] ${driver}: first chunk ${Math.round(first.at - t0)} ms after run(), ` +
        `run ended at ${Math.round(t1 - t0)} ms`,
    );
  });

  it.skipIf(skip)('keeps order per stream and stdout apart from stderr', async () => {
    const { result, chunks } = await record(sandbox, {
      image: 'shell',
      argv: ['bash', '-c', 'for i in $(seq 1 300); do echo out$i; echo err$i >&2; done'],
    });
    const lines = (p: string) => Array.from({ length: 300 }, (_, i) => `${p}${i + 1}\n`).join('');
    expect(joined(chunks, 'stdout')).toBe(lines('out'));
    expect(joined(chunks, 'stderr')).toBe(lines('err'));
    expect(result.stdout).toBe(lines('out'));
    expect(result.stderr).toBe(lines('err'));
  });

  it.skipIf(skip)('never splits a multi-byte character across chunks', async () => {
    // "€" is e2 82 ac: two writes, 300 ms apart, cut it in the middle.
    const { result, chunks } = await record(sandbox, {
      image: 'shell',
      argv: ['bash', '-c', "printf 'a\\xe2\\x82'; sleep 0.3; printf '\\xac b\\n'"],
    });
    const texts = chunks.map((c) => c.text);
    expect(texts.join('')).toBe('a€ b\n');
    expect(texts.some((t) => t.includes('\ufffd'))).toBe(false);
    // It did arrive in two pieces, the first ending before the character.
    expect(texts[0]).toBe('a');
    expect(result.stdout).toBe('a€ b\n');
  });

  it.skipIf(skip)('delivers no more than the output cap keeps', async () => {
    const { result, chunks } = await record(sandbox, {
      image: 'shell',
      // 3x the cap: cut, but short of the flood kill (4x), so the program goes on to stderr.
      argv: ['bash', '-c', "head -c 3000 /dev/zero | tr '\\0' a; echo done >&2"],
      limits: { outputBytes: 1000 },
    });
    expect(result).toMatchObject({ truncated: true, outputLimited: false, exitCode: 0 });
    expect(result.stdout).toBe('a'.repeat(1000));
    expect(joined(chunks, 'stdout')).toBe(result.stdout);
    expect(joined(chunks, 'stderr')).toBe('done\n');

    // Far past the cap: killed as a flood; still no more live output than the result keeps.
    const flood = await record(sandbox, {
      image: 'shell',
      argv: ['bash', '-c', "head -c 100000 /dev/zero | tr '\\0' b; sleep 5"],
      limits: { outputBytes: 1000 },
    });
    expect(flood.result).toMatchObject({ outputLimited: true, stdout: 'b'.repeat(1000) });
    expect(joined(flood.chunks, 'stdout')).toBe(flood.result.stdout);
  });

  it.skipIf(skip)('ignores a listener that throws', async () => {
    let calls = 0;
    const result = await sandbox.run({
      image: 'shell',
      argv: ['bash', '-c', 'echo one; echo two >&2; sleep 0.2; echo three'],
      onOutput: () => {
        calls++;
        throw new Error('listener bug');
      },
    });
    expect(result).toMatchObject({ stdout: 'one\nthree\n', stderr: 'two\n', exitCode: 0 });
    expect(calls).toBeGreaterThanOrEqual(3);
  });

  const dockerContainers = async (filters: Record<string, string[]>) =>
    (await new Docker().listContainers({ all: true, filters })).map((c) => c.Id);
  const ownedContainers = () =>
    dockerContainers({ label: [`${LABEL_OWNER}=${(sandbox as unknown as DockerDriver).ownerId}`] });

  /**
   * Starts `sleep 60` (twice, one in the background) under a unique marker, waits for its first
   * line, aborts, and measures until run() rejects and until nothing of the sandbox is left.
   */
  async function abortRun(
    label: string,
    extra: Partial<RunRequest>,
    abortWhen: 'running' | 'at-once',
  ): Promise<void> {
    const marker = `60.${Date.now() % 100_000}${Math.floor(Math.random() * 1000)}`;
    const ac = new AbortController();
    let containerId: string | undefined;
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    let abortedAt = 0;
    const before = new Set(driver === 'docker' ? await ownedContainers() : []);
    const run = sandbox.run({
      image: 'shell',
      argv: [
        'bash',
        '-c',
        // The container's id, from its /etc/hostname bind mount (cgroup v1 and v2 alike).
        `grep -o -m1 'containers/[0-9a-f]\\{64\\}' /proc/self/mountinfo; echo ready; sleep ${marker} & sleep ${marker}; wait`,
      ],
      timeoutMs: 120_000,
      signal: ac.signal,
      onOutput: (_s, text) => {
        containerId ??= /[0-9a-f]{64}/.exec(text)?.[0];
        if (text.includes('ready')) started();
      },
      ...extra,
    });
    const settled = run.then(
      () => performance.now(),
      () => performance.now(),
    );
    if (abortWhen === 'running') {
      await running;
      expect((await processesWith(marker)).length).toBeGreaterThan(0);
    } else {
      await new Promise((r) => setTimeout(r, 50));
    }
    abortedAt = performance.now();
    ac.abort();
    await expect(run).rejects.toMatchObject({ name: 'SandboxError', code: 'aborted' });
    const rejectedMs = (await settled) - abortedAt;

    const exists = async () => {
      if ((await processesWith(marker)).length > 0) return true;
      if (driver !== 'docker') return false;
      if (containerId) return (await dockerContainers({ id: [containerId] })).length > 0;
      // Never produced output: any container of this driver's that was not there before.
      return (await ownedContainers()).some((id) => !before.has(id));
    };
    while ((await exists()) && performance.now() - abortedAt < 5000) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const goneMs = performance.now() - abortedAt;
    console.warn(
      `[cancel] ${driver} ${label}: run() rejected ${Math.round(rejectedMs)} ms after abort, ` +
        `sandbox gone after ${Math.round(goneMs)} ms`,
    );
    if (driver === 'docker' && abortWhen === 'running') expect(containerId).toBeDefined();
    expect(await exists()).toBe(false);
    expect(goneMs).toBeLessThan(2000);
  }

  it.skipIf(skip)('abort kills a warm sandbox and everything in it within 2 s', async () => {
    await sandbox.warmUp();
    await abortRun('warm', {}, 'running');
  });

  it.skipIf(skip)('abort kills a cold sandbox and everything in it within 2 s', async () => {
    // Other resources than the configured defaults: no pre-started sandbox fits.
    await abortRun('cold', { limits: { memoryMb: 300 } }, 'running');
  });

  it.skipIf(skip)('abort while the sandbox is still being made stops it too', async () => {
    await abortRun('during start', { limits: { memoryMb: 310 } }, 'at-once');
  });

  it.skipIf(skip)('abort of six running calls at once leaves nothing within 2 s', async () => {
    const marker = `61.${Date.now() % 100_000}${Math.floor(Math.random() * 1000)}`;
    const ac = new AbortController();
    const ids: string[] = [];
    const runs = Array.from({ length: 6 }, () => {
      let ready!: () => void;
      const started = new Promise<void>((r) => (ready = r));
      const run = sandbox.run({
        image: 'shell',
        argv: [
          'bash',
          '-c',
          `grep -o -m1 'containers/[0-9a-f]\\{64\\}' /proc/self/mountinfo; echo ready; sleep ${marker}`,
        ],
        timeoutMs: 120_000,
        signal: ac.signal,
        onOutput: (_s, text) => {
          const id = /[0-9a-f]{64}/.exec(text)?.[0];
          if (id) ids.push(id);
          if (text.includes('ready')) ready();
        },
      });
      run.catch(() => undefined);
      return { run, started };
    });
    await Promise.all(runs.map((r) => r.started));
    // Each one's bash turns into its sleep (an exec, when its cmdline may read empty): polled.
    await expect
      .poll(async () => (await processesWith(marker)).length, { timeout: 5000 })
      .toBeGreaterThanOrEqual(6);
    const abortedAt = performance.now();
    ac.abort();
    for (const { run } of runs) await expect(run).rejects.toMatchObject({ code: 'aborted' });
    const rejectedMs = performance.now() - abortedAt;
    const left = async () =>
      (await processesWith(marker)).length +
      (driver === 'docker' && ids.length ? (await dockerContainers({ id: ids })).length : 0);
    while ((await left()) > 0 && performance.now() - abortedAt < 5000) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const goneMs = performance.now() - abortedAt;
    console.warn(
      `[cancel] ${driver} 6 at once: all rejected ${Math.round(rejectedMs)} ms after abort, ` +
        `all gone after ${Math.round(goneMs)} ms`,
    );
    if (driver === 'docker') expect(ids).toHaveLength(6);
    expect(await left()).toBe(0);
    expect(goneMs).toBeLessThan(2000);
  });

  it.skipIf(skip)('gives the next call a working sandbox after an abort', async () => {
    const r = await sandbox.run({ image: 'shell', argv: ['echo', 'next'] });
    expect(r).toMatchObject({ stdout: 'next\n', exitCode: 0 });
  });
});
