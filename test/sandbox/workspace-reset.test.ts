/**
 * DELETE /v1/workspaces/{client}: an admin resets a client's workspace through the gateway;
 * the worker deletes it before that client's next call. Also the quota as the API client sees
 * it: an over-quota write is an ordinary `ok` result with the error in stderr. Real Redis,
 * gateway, worker, Docker and loop mounts.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Keys, WorkspaceResets, createRedis } from '@toolgate/calls';
import {
  createSandbox,
  createWorkspaces,
  type Sandbox,
  type WorkspaceResetSource,
  type Workspaces,
} from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import type { RedisClient } from '@toolgate/calls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from '../support/stack.js';

const exec = promisify(execFile);
const reason =
  process.getuid?.() !== 0
    ? 'not root'
    : ((await exec('losetup', ['-f']).then(
        () => undefined,
        () => 'no loop device',
      )) ?? (await whyDriverUnavailable('docker')));
if (reason) console.warn(`workspace reset suite: skipped, ${reason}`);

describe.skipIf(reason !== undefined)('workspace admin reset through the gateway (docker)', () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  let redis: RedisClient;
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-reset-'));
    sandbox = await createSandbox(
      testSandboxConfig('docker', dir, {
        workspaceQuota: 'required',
        limits: { workspaceMb: 16, workspaceInodes: 300 },
      }),
    );
    await sandbox.warmUp(60_000);
    // The stack picks its Redis prefix; the resets read under it once it is known.
    const late: { resets?: WorkspaceResets } = {};
    const source: WorkspaceResetSource = {
      generation: (client) => late.resets!.generation(client),
      all: () => late.resets!.all(),
    };
    workspaces = createWorkspaces(sandbox.config, { resets: source });
    stack = await startStack({ services: { sandbox, workspaces } });
    redis = createRedis(stack.config.redis.url, 'command');
    late.resets = new WorkspaceResets(redis, new Keys(stack.config.redis.prefix));
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    redis?.disconnect();
    await workspaces?.unmountAll();
    await rm(dir, { recursive: true, force: true });
  });

  const run = async (tool: string, args: unknown, key: string = KEYS.alice) =>
    (await stack.call(`/tools/${tool}/execute`, { json: args, key })).json();

  it('an over-quota write is a normal result with "No space left on device" in stderr', async () => {
    const r = await run('run_shell', { command: 'head -c 40M /dev/zero > big.bin' });
    expect(r).toMatchObject({ status: 'ok', result: { timedOut: false } });
    expect(r.result.exitCode).not.toBe(0);
    expect(r.result.stderr).toMatch(/No space left on device/);
  });

  it('DELETE /v1/workspaces/{client} empties the workspace before the next call', async () => {
    expect(await run('file_write', { path: 'notes/a.txt', content: 'hello' })).toMatchObject({
      status: 'ok',
    });
    const listed = await run('file_list', {});
    expect(listed.result.entries.map((e: { name: string }) => e.name).sort()).toEqual([
      'big.bin',
      'notes',
    ]);

    const res = await stack.call('/v1/workspaces/alice', { method: 'DELETE', key: KEYS.admin });
    expect(res.status).toBe(202);
    expect(await res.json()).toMatchObject({ client: 'alice', status: 'scheduled' });

    expect(await run('file_list', {})).toMatchObject({
      status: 'ok',
      result: { entries: [] },
    });
    // The fresh workspace is the client's again, with its full quota.
    expect(
      await run('run_shell', { command: 'head -c 8M /dev/zero > again.bin && echo ok' }),
    ).toMatchObject({ status: 'ok', result: { stdout: 'ok\n', exitCode: 0 } });
    // A reset is applied once: the next call keeps what the previous one wrote.
    expect(await run('file_list', {})).toMatchObject({
      result: { entries: [expect.objectContaining({ name: 'again.bin' })] },
    });
  });

  it('is admin-only and knows only configured clients', async () => {
    const notAdmin = await stack.call('/v1/workspaces/bob', { method: 'DELETE' });
    expect(notAdmin.status).toBe(403);
    expect((await notAdmin.json()).error.code).toBe('forbidden');
    const unknown = await stack.call('/v1/workspaces/nobody', {
      method: 'DELETE',
      key: KEYS.admin,
    });
    expect(unknown.status).toBe(404);
    expect((await unknown.json()).error.code).toBe('not_found');
  });

  it('the reaper applies a reset to a workspace no call uses, once no call can be running in it', async () => {
    await run('file_write', { path: 'x.txt', content: 'x' }, KEYS.admin);
    const opsDir = workspaces.pathFor('ops');
    await stack.call('/v1/workspaces/ops', { method: 'DELETE', key: KEYS.admin });
    // Just used: a call may still run in it, so the reaper leaves it for a later pass.
    expect(await workspaces.reap()).toMatchObject({ reset: 0 });
    expect((await exec('findmnt', ['-rn', '-o', 'TARGET'])).stdout.split('\n')).toContain(opsDir);
    // busyMs is the longest call (5 min + 1 min): pretend that much time has passed.
    expect(await workspaces.reap(Date.now() + 400_000)).toMatchObject({ reset: 1 });
    const { stdout } = await exec('findmnt', ['-rn', '-o', 'TARGET']);
    expect(stdout.split('\n')).not.toContain(opsDir);
  });
});
