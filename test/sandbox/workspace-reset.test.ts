/**
 * DELETE /v1/workspaces/{client}: an admin resets a client's workspace through the gateway;
 * the worker deletes it before that client's next call. Also the quota as the API client sees
 * it: an over-quota write is an ordinary `ok` result with the error in stderr. Real Redis,
 * gateway, worker, Docker and loop mounts.
 */
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
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
import { startRedisServer } from '../support/redis-server.js';
import { KEYS, startStack, type Stack } from '../support/stack.js';

const exec = promisify(execFile);
const noLoop =
  process.getuid?.() !== 0
    ? 'not root'
    : await exec('losetup', ['-f']).then(
        () => undefined,
        () => 'no loop device',
      );
const reason = noLoop ?? (await whyDriverUnavailable('docker'));
if (reason) console.warn(`workspace reset suite: skipped, ${reason}`);
const drivers = ['docker', 'bwrap'] as const;
const reasons = Object.fromEntries(
  await Promise.all(
    drivers.map(async (d) => [d, noLoop ?? (await whyDriverUnavailable(d))] as const),
  ),
);
for (const d of drivers)
  if (reasons[d])
    console.warn(`workspace reset across Redis restarts: ${d} skipped: ${reasons[d]}`);

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
      current: (client) => late.resets!.current(client),
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

/**
 * The reset must apply whatever Redis forgot. A Redis without persistence is replaced by a fresh
 * one (as the quickstart's is at every `up`, and any Redis may be flushed or failed over): its
 * first reset of the client must still empty the workspace the previous Redis's reset left
 * marked. Before, the generation counter started again at 1, the marker said 1, and `1 < 1`
 * applied nothing. Warm pools on; the same host's workspaces across both Redis lifetimes.
 */
describe.each(drivers)(
  'workspace reset across a Redis restart without persistence: %s',
  (driver) => {
    const skip = reasons[driver] !== undefined;
    let dir: string;
    let sandbox: Sandbox;
    const cleanups: (() => Promise<unknown> | unknown)[] = [];

    beforeAll(async () => {
      if (skip) return;
      dir = await mkdtemp(path.join(tmpdir(), `tg-reset-restart-${driver}-`));
      await chmod(dir, 0o711);
      sandbox = await createSandbox(
        testSandboxConfig(driver, dir, {
          workspaceQuota: 'required',
          limits: { workspaceMb: 16, workspaceInodes: 300 },
          pool: { size: 2 },
        }),
      );
      await sandbox.warmUp(60_000);
    }, 120_000);
    afterAll(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
      await sandbox?.close();
      if (dir) {
        await createWorkspaces(sandbox.config).unmountAll();
        await rm(dir, { recursive: true, force: true });
      }
    });

    /** A fresh redis-server (no RDB, no AOF) with a gateway and worker on it; the host's workspaces. */
    const life = async () => {
      const server = await startRedisServer();
      const redisConfig = { url: server.url, prefix: 'tg' };
      const redis = createRedis(redisConfig.url, 'command');
      const workspaces = createWorkspaces(sandbox.config, {
        resets: new WorkspaceResets(redis, new Keys(redisConfig.prefix)),
      });
      const stack = await startStack({
        services: { sandbox, workspaces },
        config: { redis: redisConfig },
      });
      let stopped = false;
      const stop = async () => {
        if (stopped) return;
        stopped = true;
        await stack.close();
        redis.disconnect();
        await server.stop();
      };
      cleanups.push(stop);
      const shell = async (command: string) =>
        (await stack.call('/tools/run_shell/execute', { json: { command } })).json();
      const reset = async () => {
        const res = await stack.call('/v1/workspaces/alice', { method: 'DELETE', key: KEYS.admin });
        expect(res.status).toBe(202);
        return res.json();
      };
      return { shell, reset, stop };
    };
    const probe = 'ls reset-probe.txt';

    it.skipIf(skip)(
      "the first reset on a fresh Redis empties the workspace the last one's reset had marked",
      async () => {
        const first = await life();
        expect(await first.shell('echo 1 > reset-probe.txt && echo ok')).toMatchObject({
          status: 'ok',
          result: { exitCode: 0 },
        });
        expect(await first.reset()).toMatchObject({ generation: 1 });
        expect((await first.shell(probe)).result.exitCode).not.toBe(0);
        expect(await first.shell('echo 2 > reset-probe.txt && echo ok')).toMatchObject({
          result: { exitCode: 0 },
        });
        await first.stop();

        const second = await life();
        // Nothing was reset since: the file is still there.
        expect(await second.shell(probe)).toMatchObject({
          result: { exitCode: 0, stdout: 'reset-probe.txt\n' },
        });
        // The fresh Redis counts from 1 again, as the last one did; the reset applies anyway.
        expect(await second.reset()).toMatchObject({ generation: 1, resetId: expect.any(String) });
        expect(await second.shell(probe)).toMatchObject({
          status: 'ok',
          result: { exitCode: 2, stderr: expect.stringMatching(/No such file/) },
        });
        // Applied once: what is written after it stays.
        await second.shell('echo 3 > reset-probe.txt');
        expect((await second.shell(probe)).result.exitCode).toBe(0);
        await second.stop();
      },
      180_000,
    );
  },
);
