import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startService, type Service } from './support/process.js';

/**
 * Cancelling a call that has already ended is 409 `conflict` (docs/long-running-calls.md),
 * whichever reaches Redis first: the worker's answer to the waiting gateway or its record of
 * the outcome (written in its next batch, a few ms later). A cancel sent in between once
 * answered 200 with the `ok` call. Gateway and worker run as their own processes, as deployed:
 * in one process the record lands before the client can send the cancel.
 */

const KEY = 'alice-key-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'toolgate-cancel-'));
const services: Service[] = [];
let base = '';

beforeAll(async () => {
  const config = join(dir, 'toolgate.yaml');
  writeFileSync(
    config,
    [
      'clients:',
      `  - { id: alice, key: ${KEY}, tools: ['*'], rateLimit: { perMinute: 100000 } }`,
      '',
    ].join('\n'),
  );
  const env = {
    REDIS_URL: inject('redisUrl'),
    TOOLGATE_REDIS_PREFIX: `c${randomUUID().slice(0, 8)}`,
    TOOLGATE_CONFIG: config,
    PORT: '0',
    HOST: '127.0.0.1',
    WORKER_METRICS_PORT: '0',
    TOOLGATE_WORKER_QUEUES: 'fast',
  };
  const worker = startService('worker', env);
  const gateway = startService('gateway', env);
  services.push(worker, gateway);
  await worker.waitFor(/worker started/);
  const [, port] = await gateway.waitFor(/"port":(\d+),"msg":"gateway listening"/);
  base = `http://127.0.0.1:${port}`;
});
afterAll(() => {
  for (const s of services) s.child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

const post = (path: string, body?: unknown) =>
  fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });

describe('cancel right after the end', () => {
  it('answers 409 conflict for each of 800 calls cancelled right after their 200 answer', async () => {
    // Eight callers at once, so the worker's record batches trail its answers as they do on a
    // busy deployment (before the fix, about 1 cancel in 100 was answered 200).
    const answers = new Map<number, number>();
    let last = '';
    await Promise.all(
      Array.from({ length: 8 }, async (_, caller) => {
        for (let i = 0; i < 100; i++) {
          // A new expression each time: a cache hit would be answered by the gateway itself.
          const res = await post('/tools/calculator/execute', {
            expression: `${caller} * 1000 + ${i} + 0.5`,
          });
          expect(res.status).toBe(200);
          const { id, status } = (await res.json()) as { id: string; status: string };
          expect(status).toBe('ok');
          last = id;
          const cancel = await post(`/v1/calls/${id}/cancel`);
          answers.set(cancel.status, (answers.get(cancel.status) ?? 0) + 1);
          if (cancel.status !== 409) continue;
          expect(await cancel.json()).toMatchObject({
            error: { code: 'conflict', details: { status: 'ok' } },
          });
        }
      }),
    );
    expect(Object.fromEntries(answers)).toEqual({ 409: 800 });
    // The cancels changed nothing: the call still reads ok.
    const after = await fetch(`${base}/v1/calls/${last}`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(await after.json()).toMatchObject({ status: 'ok' });
  }, 120_000);
});
