/**
 * Issue 31: what runs in a sandbox works for a client whose data is not on the home shard — a
 * sandboxed call, a session (its calls go through the worker's own queue on the client's shard),
 * and code mode (the capability on the home shard, the script's nested call on its caller's).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCodeModeStack, whyNoCodeMode } from './support/code-mode-stack.js';
import { startRedisServer, type RedisServer } from './support/redis-server.js';
import { KEYS, type Stack } from './support/stack.js';

const reason = await whyNoCodeMode();
if (reason) console.warn(`shards-sandbox: skipped, ${reason}`);

interface Outcome {
  id: string;
  status: string;
  result?: { stdout: string; exitCode: number };
}

describe.skipIf(reason !== undefined)('a client on a shard that is not home', () => {
  let home: RedisServer;
  let other: RedisServer;
  let stack: Stack;
  let close: () => Promise<void>;

  beforeAll(async () => {
    [home, other] = await Promise.all([startRedisServer(), startRedisServer()]);
    ({ stack, close } = await startCodeModeStack({
      config: {
        redis: {
          prefix: `ss${randomUUID().slice(0, 6)}`,
          shards: [
            { id: 'home', url: home.url, home: true },
            { id: 'far', url: other.url },
          ],
        },
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['*'], shard: 'far' },
          { id: 'ops', key: KEYS.admin, tools: ['*'], admin: true, shard: 'home' },
        ],
      },
    }));
  }, 120_000);
  afterAll(async () => {
    await close?.();
    await Promise.all([home?.stop(), other?.stop()]);
  });

  /** The keys on a shard's Redis naming `text`. */
  const on = async (server: RedisServer, text: string) => {
    const redis = new Redis(server.url);
    try {
      return await redis.keys(`*${text}*`);
    } finally {
      redis.disconnect();
    }
  };

  it('runs its sandboxed call, with the record on its shard', async () => {
    const res = await stack.call('/tools/run_python/execute', { json: { code: 'print(6*7)' } });
    const out = (await res.json()) as Outcome;
    expect(out).toMatchObject({ status: 'ok', result: { stdout: '42\n' } });
    expect((await on(other, out.id)).length).toBeGreaterThan(0);
    expect(await on(home, out.id)).toEqual([]);
  }, 60_000);

  it('keeps a session across calls, its calls on its shard', async () => {
    const opened = await stack.call('/v1/sessions', { json: { tool: 'run_python' } });
    expect(opened.status).toBe(201);
    const { id: session } = (await opened.json()) as { id: string };
    const run = async (code: string) =>
      (await (
        await stack.call('/tools/run_python/execute', {
          json: { code },
          headers: { 'x-toolgate-session': session },
        })
      ).json()) as Outcome;
    expect(await run('x = 41')).toMatchObject({ status: 'ok' });
    const second = await run('print(x + 1)');
    expect(second).toMatchObject({ status: 'ok', result: { stdout: '42\n' } });
    expect((await on(other, second.id)).length).toBeGreaterThan(0);
    expect(await on(home, second.id)).toEqual([]);
    expect((await stack.call(`/v1/sessions/${session}`, { method: 'DELETE' })).status).toBe(204);
  }, 90_000);

  it('runs code mode: the script calls a tool through the gateway, on its caller’s shard', async () => {
    const res = await stack.call('/tools/run_code_with_tools/execute', {
      json: { code: 'print(toolgate.calculator(expression="6*7"))' },
    });
    const out = (await res.json()) as Outcome;
    expect(out).toMatchObject({ status: 'ok', result: { exitCode: 0 } });
    expect(out.result!.stdout).toContain('42');
    // The nested call is the caller's: listed among its calls, recorded on its shard.
    const listed = (await (await stack.call('/v1/calls?tool=calculator&limit=5')).json()) as {
      calls: { id: string }[];
    };
    expect(listed.calls.length).toBeGreaterThan(0);
    expect((await on(other, listed.calls[0]!.id)).length).toBeGreaterThan(0);
    expect(await on(home, listed.calls[0]!.id)).toEqual([]);
  }, 90_000);
});
