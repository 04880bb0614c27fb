import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mountTable } from '@toolgate/sandbox';
import { whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { dockerSandbox } from './support/docker-worker.js';
import { afterAll, describe, expect, it } from 'vitest';
import { TOOLGATE_BIN, startService, type Service } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

// A stopping worker (SIGTERM) removes its warm pool before it waits for its calls, so one killed
// when its grace period runs out (compose's stop_grace_period, a pod's) leaves only the
// containers of the calls it was running; `toolgate sandbox prune` removes those. Real worker
// process, real Docker engine.
const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`worker-stop: skipped, ${reason}`);

function containersOf(label: string): string[] {
  return execFileSync('docker', ['ps', '-aq', '--filter', `label=${label}`], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean);
}

async function until<T>(
  what: string,
  fn: () => Promise<T | undefined> | T | undefined,
  ms: number,
) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(reason !== undefined)('a stopping worker and its warm pool', () => {
  const services: Service[] = [];
  let stack: Stack | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-stop-'));
  afterAll(async () => {
    for (const s of services) if (s.child.exitCode === null) s.child.kill('SIGKILL');
    await Promise.all(services.map((s) => s.exited));
    await stack?.close();
    // A killed worker leaves its slot mounts (the next worker on this stateDir would reuse
    // them): undo them, deepest first, so the directory can go.
    const mounts = (await mountTable())
      .map((m) => m.target)
      .filter((t) => t.startsWith(`${dir}/`))
      .sort((a, b) => b.length - a.length);
    for (const target of mounts) execFileSync('umount', ['-l', target]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('removes the warm pool at SIGTERM, before its running call ends; after a kill, prune removes the rest', async () => {
    stack = await startStack({ worker: false });
    const file = join(dir, 'toolgate.json');
    writeFileSync(
      file,
      JSON.stringify({
        redis: stack.config.redis,
        clients: [{ id: 'alice', key: KEYS.alice, tools: ['*'] }],
        worker: { queues: ['sandbox'], sandboxConcurrency: 2, metricsPort: 0 },
        log: { level: 'info' },
        sandbox: dockerSandbox(dir, { pool: 2, workspaceQuota: 'off' }),
      }),
    );
    const worker = startService('worker', { TOOLGATE_CONFIG: file });
    services.push(worker);
    await worker.waitFor(/worker started/, 60_000);
    const pid = worker.child.pid!;
    const mine = () => containersOf(`toolgate.pid=${pid}`);
    // Two warm containers per image.
    await until('the warm pool', () => (mine().length === 4 ? true : undefined), 60_000);

    const res = await stack.call('/tools/run_shell/execute?wait=false', {
      json: { command: 'sleep 25; echo done' },
    });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const status = async () =>
      ((await (await stack!.call(`/v1/calls/${id}`)).json()) as { status: string }).status;
    await until(
      'the call to run',
      async () => ((await status()) === 'running' ? true : undefined),
      30_000,
    );
    // The call took a warm container; the pool refills to two per image.
    await until('the pool to refill', () => (mine().length === 5 ? true : undefined), 30_000);

    worker.child.kill('SIGTERM');
    // Within seconds, while the call still runs: only its own container is left.
    const left = await until(
      'the warm pool to be removed',
      () => {
        const now = mine();
        return now.length === 1 ? now : undefined;
      },
      10_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; left ${mine().length}\n${worker.output().slice(-3000)}`);
    });
    expect(await status()).toBe('running');
    expect(worker.child.exitCode).toBeNull();

    // The grace period runs out: killed mid-drain, its call's container stays behind.
    worker.child.kill('SIGKILL');
    await worker.exited;
    expect(mine()).toEqual(left);
    const pruned = await new Promise<string>((resolve, reject) =>
      execFile(
        process.execPath,
        [TOOLGATE_BIN, 'sandbox', 'prune', '--json'],
        { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp' } },
        (err, out) => (err ? reject(err) : resolve(out)),
      ),
    );
    const rows = JSON.parse(pruned) as { id: string; removed: boolean; reason: string }[];
    const row = rows.find((r) => r.id.startsWith(left[0]!));
    expect(row).toMatchObject({
      removed: true,
      reason: `its worker (pid ${pid} on this host) is gone`,
    });
    expect(mine()).toEqual([]);
  }, 120_000);
});
