/**
 * A worker killed mid-script (kill -9) never runs its cleanup: the script's channel directory
 * stays under `<stateDir>/channels`. The next worker on that stateDir removes it, with each
 * driver, and leaves its own.
 */
import { chmod, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { startService, type Service } from './support/process.js';
import { freePort } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

const drivers = [] as ('docker' | 'bwrap')[];
for (const driver of ['docker', 'bwrap'] as const) {
  const reason = await whyDriverUnavailable(driver);
  if (reason) console.warn(`code-mode-leftovers: ${driver} skipped, ${reason}`);
  else drivers.push(driver);
}

/** Every directory under `<stateDir>/channels`, two levels down (owner, then channel). */
async function channelEntries(stateDir: string): Promise<string[]> {
  const root = path.join(stateDir, 'channels');
  const out: string[] = [];
  for (const owner of await readdir(root).catch(() => [])) {
    out.push(owner);
    for (const dir of await readdir(path.join(root, owner)).catch(() => []))
      out.push(`${owner}/${dir}`);
  }
  return out;
}

async function waitUntil(what: string, ok: () => Promise<boolean>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(drivers.length === 0)('channel directories of a worker killed mid-script', () => {
  const services: Service[] = [];
  let stack: Stack | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    for (const s of services.splice(0)) {
      if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGTERM');
      await s.exited;
    }
    await stack?.close();
    stack = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.each(drivers)(
    'are removed by the next worker on the same stateDir (%s)',
    async (driver) => {
      dir = await mkdtemp(path.join(tmpdir(), 'tg-channels-'));
      await chmod(dir, 0o711); // the sandbox's uid reaches the channel (bwrap)
      const port = await freePort();
      const clients = [{ id: 'alice', key: KEYS.alice, tools: ['*'] }];
      stack = await startStack({ worker: false, port, config: { clients } });
      // A short reaper interval: the dead worker is known dead once its Redis heartbeat is
      // older than 8 s (WORKER_ALIVE_MS); the next pass after that removes its directories.
      const sandbox = testSandboxConfig(driver, dir, {
        reaper: { intervalMs: 1000 },
        pool: { size: 0 },
      });
      const file = path.join(dir, 'toolgate.json');
      await writeFile(
        file,
        JSON.stringify({
          redis: stack.config.redis,
          clients,
          worker: { queues: ['sandbox'], sandboxConcurrency: 2, metricsPort: 0 },
          log: { level: 'info' },
          codeMode: { gatewayUrl: `http://127.0.0.1:${port}` },
          sandbox: {
            driver,
            workspacesRoot: sandbox.workspacesRoot,
            stateDir: sandbox.stateDir,
            images: sandbox.images,
            pool: { size: 0 },
            reaper: { intervalMs: 1000 },
            workspaceQuota: 'off',
            bwrap: { seccompFilter: sandbox.bwrap.seccompFilter },
          },
        }),
      );
      const victim = startService('worker', { TOOLGATE_CONFIG: file });
      services.push(victim);
      await victim.waitFor(/worker started/, 60_000);

      const res = await stack.call('/tools/run_code_with_tools/execute?wait=false', {
        json: { code: 'import time\ntime.sleep(60)' },
      });
      expect(res.status).toBe(202);
      await waitUntil(
        'the script has its channel directory',
        async () => (await channelEntries(sandbox.stateDir)).length > 0,
        30_000,
      );
      victim.child.kill('SIGKILL');
      await victim.exited;
      const left = await channelEntries(sandbox.stateDir);
      expect(left.length).toBeGreaterThan(0);

      const next = startService('worker', { TOOLGATE_CONFIG: file });
      services.push(next);
      await next.waitFor(/worker started/, 60_000);
      // Its own script's channel, made while the dead worker's leftovers are still there.
      const own = await stack.call('/tools/run_code_with_tools/execute?wait=false', {
        json: { code: 'import time\ntime.sleep(60)' },
      });
      expect(own.status).toBe(202);
      await waitUntil(
        `the dead worker's channel directories (${left.join(', ')}) are removed`,
        async () => {
          const now = await channelEntries(sandbox.stateDir);
          return left.every((e) => !now.includes(e));
        },
        30_000,
      );
      // The live worker's script keeps its channel.
      await waitUntil(
        "the live worker's script has its channel directory",
        async () => (await channelEntries(sandbox.stateDir)).length >= 2,
        30_000,
      );
      // Done with it: a stopping worker would otherwise wait out its 60 s sleep.
      const { id } = (await own.json()) as { id: string };
      const cancel = await stack.call(`/v1/calls/${id}/cancel`, { method: 'POST' });
      expect(cancel.status).toBe(200);
    },
    150_000,
  );
});
