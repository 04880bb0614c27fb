import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';
import { testTools } from './support/tools.js';

// Sandboxed tools through the whole path: HTTP → gateway → sandbox queue → worker → container.
const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`sandboxed-calls: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('sandboxed calls through the gateway (docker)', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'toolgate-e2e-'));
    sandbox = await createSandbox(testSandboxConfig('docker', dir));
    await sandbox.warmUp(60_000);
    stack = await startStack({
      tools: testTools,
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
    });
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const run = async (tool: string, args: unknown, key: string = KEYS.alice) =>
    (await stack.call(`/tools/${tool}/execute`, { json: args, key })).json();

  it('run_python answers {stdout, stderr, exitCode, timedOut, truncated}', async () => {
    expect(await run('run_python', { code: 'print(6*7)' })).toMatchObject({
      status: 'ok',
      result: { stdout: '42\n', stderr: '', exitCode: 0, timedOut: false, truncated: false },
    });
  });

  it('files written by one call are read by the next, and another client cannot see them', async () => {
    expect(await run('file_write', { path: 'notes/a.txt', content: 'hello' })).toMatchObject({
      status: 'ok',
    });
    expect(await run('run_shell', { command: 'cat notes/a.txt' })).toMatchObject({
      result: { stdout: 'hello' },
    });
    expect(await run('file_read', { path: 'notes/a.txt' })).toMatchObject({
      result: { content: 'hello' },
    });
    const other = await run('file_read', { path: 'notes/a.txt' }, KEYS.admin);
    expect(other).toMatchObject({ status: 'error' });
  });

  it('paths that escape the workspace get invalid_path', async () => {
    for (const path of ['/etc/passwd', '../../etc/passwd']) {
      expect(await run('file_read', { path })).toMatchObject({
        status: 'error',
        error: { code: 'invalid_path' },
      });
    }
  });

  it('file_delete needs approval', async () => {
    const res = await stack.call('/tools/file_delete/execute', { json: { path: 'notes/a.txt' } });
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ status: 'pending_approval' });
  });

  it('a slow sandboxed call does not delay calculator calls (separate queues)', async () => {
    const slow = run('run_python', { code: 'import time; time.sleep(5); print("done")' });
    await new Promise((r) => setTimeout(r, 300));
    const started = performance.now();
    expect(await run('calculator', { expression: '1+1' })).toMatchObject({ result: 2 });
    // Behind the sandboxed call it would wait ~4.7 s.
    expect(performance.now() - started).toBeLessThan(3000);
    expect(await slow).toMatchObject({ result: { stdout: 'done\n' } });
  });
});
