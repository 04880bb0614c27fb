import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { startService, type Service } from './support/process.js';

const started: Service[] = [];
afterAll(() => {
  for (const s of started) s.child.kill('SIGKILL');
});

function configFile(text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'toolgate-')), 'toolgate.yaml');
  writeFileSync(path, text);
  return path;
}

describe('the real processes', () => {
  it('a bad config file stops the process with a message naming the field', async () => {
    const gateway = startService('gateway', {
      TOOLGATE_CONFIG: configFile('server:\n  port: eighty\n'),
    });
    started.push(gateway);
    expect(await gateway.exited).toBe(2);
    expect(gateway.output()).toContain('invalid configuration: /server/port: must be integer');
    const worker = startService('worker', {
      TOOLGATE_CONFIG: configFile('clients:\n  - id: x\n    key: ${UNSET_TOOLGATE_KEY}\n'),
    });
    started.push(worker);
    expect(await worker.exited).toBe(2);
    expect(worker.output()).toContain(
      '/clients/0/key: environment variable UNSET_TOOLGATE_KEY is not set',
    );
  });

  it('development mode: one admin key printed once, loopback only; SIGTERM exits cleanly', async () => {
    const env = {
      REDIS_URL: inject('redisUrl'),
      TOOLGATE_REDIS_PREFIX: `p${randomUUID().slice(0, 8)}`,
      PORT: '0',
      WORKER_METRICS_PORT: '0',
      TOOLGATE_WORKER_QUEUES: 'fast',
    };
    const worker = startService('worker', env);
    const gateway = startService('gateway', env);
    started.push(worker, gateway);
    await worker.waitFor(/worker started/);
    const [, base] = await gateway.waitFor(/Point your assistant at: (http:\/\/127\.0\.0\.1:\d+)/);
    const [, key] = await gateway.waitFor(/Development admin key: +(tg_dev_\S+)/);
    expect(gateway.output().split(key!).length - 1).toBe(2); // the key line and the curl example, nowhere else
    // The bind address, from the gateway's own log line (loopback only in development mode).
    await gateway.waitFor(/"msg":"gateway listening"/);
    expect(gateway.output()).toMatch(/"host":"127\.0\.0\.1","port":\d+,"msg":"gateway listening"/);

    const res = await fetch(`${base}/tools/calculator/execute`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ expression: '2*(3+4)' }),
    });
    expect(await res.json()).toMatchObject({ status: 'ok', result: 14 });

    gateway.child.kill('SIGTERM');
    worker.child.kill('SIGTERM');
    expect(await gateway.exited).toBe(0);
    expect(await worker.exited).toBe(0);
    expect(worker.output()).toContain('worker stopped');
  });
});
