import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { dockerSandbox } from './support/docker-worker.js';
import { afterAll, describe, expect, it } from 'vitest';
import { startService, type Service } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

// A worker hosting a session killed (kill -9): the call running in the session and the next
// one answer `session_lost` within worker.lostCallTimeoutMs (docs/sessions.md).
const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`session-lost: skipped, ${reason}`);

const LOST_CALL_TIMEOUT_MS = 6000;

describe.skipIf(reason !== undefined)('a worker hosting a session killed', () => {
  let worker: Service | undefined;
  let stack: Stack | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-session-lost-'));
  chmodSync(dir, 0o711);
  afterAll(async () => {
    if (worker && worker.child.exitCode === null) worker.child.kill('SIGTERM');
    await worker?.exited;
    // No live worker is left to reap the killed one's session container: removed here.
    const pid = worker?.child.pid;
    if (pid !== undefined) {
      const ids = execFileSync('docker', ['ps', '-aq', '--filter', `label=toolgate.pid=${pid}`])
        .toString()
        .split('\n')
        .filter(Boolean);
      if (ids.length > 0) execFileSync('docker', ['rm', '-f', ...ids]);
    }
    await stack?.close();
    // The killed worker's slots mount (a live worker undoes it on its way out).
    try {
      execFileSync('umount', ['-l', join(dir, 'state', 'slots')], { stdio: 'ignore' });
    } catch {
      // not mounted
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers session_lost within worker.lostCallTimeoutMs, then forgets the session', async () => {
    const clients = [{ id: 'alice', key: KEYS.alice, tools: ['*'] }];
    const common = { clients, worker: { lostCallTimeoutMs: LOST_CALL_TIMEOUT_MS, metricsPort: 0 } };
    stack = await startStack({ worker: false, config: common });
    const file = join(dir, 'toolgate.json');
    writeFileSync(
      file,
      JSON.stringify({
        ...common,
        redis: stack.config.redis,
        worker: { ...common.worker, queues: ['sandbox'] },
        log: { level: 'info' },
        sandbox: dockerSandbox(dir, { pool: 1, workspaceQuota: 'off' }),
      }),
    );
    worker = startService('worker', { TOOLGATE_CONFIG: file });
    await worker.waitFor(/worker started/, 60_000);

    const created = await stack.call('/v1/sessions', { json: { tool: 'run_python' } });
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    const run = (code: string) =>
      stack!
        .call('/tools/run_python/execute', {
          json: { code },
          headers: { 'x-toolgate-session': id },
        })
        .then(async (res) => ({ status: res.status, body: (await res.json()) as unknown }));
    expect(await run('x = 1')).toMatchObject({ status: 200, body: { status: 'ok' } });

    const running = run('import time\ntime.sleep(60)');
    await worker.waitFor(/session started/, 10_000);
    await new Promise((r) => setTimeout(r, 500));
    worker.child.kill('SIGKILL');
    await worker.exited;
    const killedAt = Date.now();

    const next = await run('print(x)');
    const nextAfterMs = Date.now() - killedAt;
    const first = await running;
    const firstAfterMs = Date.now() - killedAt;
    console.warn(
      `session-lost: next call after ${nextAfterMs} ms, running call after ${firstAfterMs} ms`,
    );
    for (const answer of [next, first]) {
      expect(answer).toMatchObject({
        status: 200,
        body: { status: 'error', error: { code: 'session_lost' } },
      });
    }
    expect(nextAfterMs).toBeLessThan(LOST_CALL_TIMEOUT_MS);
    expect(firstAfterMs).toBeLessThan(LOST_CALL_TIMEOUT_MS);
    // The reaper marked the session lost: the next call hears so once more (it never ran),
    // then the session is forgotten; it is no longer listed or counted already.
    expect(await run('print(x)')).toMatchObject({ body: { error: { code: 'session_lost' } } });
    expect(await run('print(x)')).toMatchObject({
      status: 404,
      body: { error: { code: 'session_not_found' } },
    });
    const list = (await (await stack.call('/v1/sessions')).json()) as { sessions: unknown[] };
    expect(list.sessions).toEqual([]);
  }, 120_000);
});
