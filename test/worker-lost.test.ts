import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { dockerSandbox } from './support/docker-worker.js';
import { afterAll, describe, expect, it } from 'vitest';
import { startService, type Service } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

// A worker killed mid-call (kill -9): its callers hear within worker.lostCallTimeoutMs (12 s),
// not after BullMQ's default stall check (a minute or more), and its containers are reaped.
const reason = await whyDriverUnavailable('docker');
if (reason) console.warn(`worker-lost: skipped, ${reason}`);

const LOST_WITHIN_MS = 15_000;

describe.skipIf(reason !== undefined)('a worker killed mid-call', () => {
  const services: Service[] = [];
  let stack: Stack | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-lost-'));
  afterAll(async () => {
    // SIGTERM: a live worker removes its own containers on the way out.
    for (const s of services) if (s.child.exitCode === null) s.child.kill('SIGTERM');
    await Promise.all(services.map((s) => s.exited));
    await stack?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('settles its calls within 15 s (worker_lost, the tool is not idempotent) and reaps its containers', async () => {
    // Polling eight calls every 100 ms: more requests than the default rate allows; eight
    // sandbox calls at once: more than the default share.
    stack = await startStack({
      worker: false,
      config: {
        clients: [
          {
            id: 'alice',
            key: KEYS.alice,
            tools: ['*'],
            rateLimit: { perMinute: 100_000 },
            limits: { sandboxInFlight: 8 },
          },
        ],
      },
    });
    const config = {
      redis: stack.config.redis,
      clients: [{ id: 'alice', key: KEYS.alice, tools: ['*'], limits: { sandboxInFlight: 8 } }],
      worker: { queues: ['sandbox'], sandboxConcurrency: 4, metricsPort: 0 },
      log: { level: 'info' },
      // Workspace images stay mounted across worker restarts; this test is not about them.
      sandbox: dockerSandbox(dir, { pool: 1, workspaceQuota: 'off' }),
    };
    const file = join(dir, 'toolgate.json');
    writeFileSync(file, JSON.stringify(config));
    // One after the other: mount setup of two workers starting together is another test's.
    for (let i = 0; i < 2; i++) {
      const worker = startService('worker', { TOOLGATE_CONFIG: file });
      services.push(worker);
      await worker.waitFor(/worker started/, 60_000);
    }

    const ids: string[] = [];
    for (let i = 0; i < 8; i++) {
      const res = await stack.call('/tools/run_shell/execute?wait=false', {
        // Long enough for all eight to be running at once even when a loaded machine starts
        // the containers slowly; short enough that the survivor's end well within 15 s.
        json: { command: 'sleep 10; echo done' },
      });
      expect(res.status).toBe(202);
      ids.push(((await res.json()) as { id: string }).id);
    }
    const status = async (id: string) =>
      (await (await stack!.call(`/v1/calls/${id}`)).json()) as {
        status: string;
        error?: { code: string };
      };
    // Both workers busy with four calls each.
    for (let t = 0; ; t++) {
      const states = await Promise.all(ids.map(status));
      if (states.every((s) => s.status === 'running')) break;
      expect(t, JSON.stringify(states)).toBeLessThan(100);
      await new Promise((r) => setTimeout(r, 100));
    }
    const victim = services[0]!;
    const pid = victim.child.pid!;
    expect(containersOf(`toolgate.pid=${pid}`).length).toBeGreaterThan(0);
    victim.child.kill('SIGKILL');
    await victim.exited;
    const killedAt = Date.now();

    const settled = new Map<string, { status: string; code?: string; afterMs: number }>();
    while (settled.size < ids.length && Date.now() - killedAt < 30_000) {
      for (const id of ids) {
        if (settled.has(id)) continue;
        const s = await status(id);
        if (s.status !== 'running' && s.status !== 'queued') {
          settled.set(id, {
            status: s.status,
            ...(s.error ? { code: s.error.code } : {}),
            afterMs: Date.now() - killedAt,
          });
        }
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    const all = [...settled.values()];
    expect(all).toHaveLength(8);
    console.warn(`worker-lost: ${JSON.stringify(all)}`);
    for (const s of all) expect(s.afterMs, JSON.stringify(all)).toBeLessThan(LOST_WITHIN_MS);
    expect(all.filter((s) => s.status === 'ok')).toHaveLength(4);
    expect(
      all.filter((s) => s.code === 'worker_lost'),
      JSON.stringify(all),
    ).toHaveLength(4);

    // The dead worker's containers (its running calls and its warm pool) are gone as well.
    for (;;) {
      const left = containersOf(`toolgate.pid=${pid}`);
      if (left.length === 0) break;
      expect(Date.now() - killedAt, `containers left: ${left.join(' ')}`).toBeLessThan(
        LOST_WITHIN_MS,
      );
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(services[1]!.output()).toContain('call of a dead worker moved on');
  }, 120_000);
});

function containersOf(label: string): string[] {
  return execFileSync('docker', ['ps', '-aq', '--filter', `label=${label}`], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean);
}

describe('a fast-queue worker killed mid-call', () => {
  const services: Service[] = [];
  let stack: Stack | undefined;
  let sink: Server | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'toolgate-lost-fast-'));
  afterAll(async () => {
    for (const s of services) if (s.child.exitCode === null) s.child.kill('SIGTERM');
    await Promise.all(services.map((s) => s.exited));
    await stack?.close();
    sink?.closeAllConnections();
    sink?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('settles its calls within 15 s: a non-idempotent one never runs twice (worker_lost)', async () => {
    // The effect every http_post has: a request to this sink, which answers after 6 s.
    const received: string[] = [];
    sink = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push(body);
        setTimeout(() => res.end('ok'), 6000).unref();
      });
    });
    await new Promise<void>((r) => sink!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(sink.address() as { port: number }).port}/effects`;
    stack = await startStack({
      worker: false,
      config: {
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 100_000 } },
        ],
      },
    });
    const file = join(dir, 'toolgate.json');
    writeFileSync(
      file,
      JSON.stringify({
        redis: stack.config.redis,
        clients: [{ id: 'alice', key: KEYS.alice, tools: ['*'] }],
        worker: { queues: ['fast'], concurrency: 2, metricsPort: 0 },
        policy: { http: { allowPrivateNetworks: true } },
        log: { level: 'info' },
      }),
    );
    for (let i = 0; i < 2; i++) {
      const worker = startService('worker', { TOOLGATE_CONFIG: file });
      services.push(worker);
      await worker.waitFor(/worker started/, 60_000);
    }
    // Two slots per worker, four calls: each worker runs two.
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await stack.call('/tools/http_post/execute?wait=false', {
        json: { url, body: `effect ${i}` },
      });
      expect(res.status).toBe(202);
      ids.push(((await res.json()) as { id: string }).id);
    }
    const status = async (id: string) =>
      (await (await stack!.call(`/v1/calls/${id}`)).json()) as {
        status: string;
        error?: { code: string };
      };
    for (let t = 0; received.length < 4; t++) {
      expect(t, `the sink heard ${received.length} of 4`).toBeLessThan(100);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect((await Promise.all(ids.map(status))).map((s) => s.status)).toEqual(
      Array(4).fill('running'),
    );
    const victim = services[0]!;
    victim.child.kill('SIGKILL');
    await victim.exited;
    const killedAt = Date.now();

    const settled = new Map<string, { status: string; code?: string; afterMs: number }>();
    while (settled.size < ids.length && Date.now() - killedAt < 30_000) {
      for (const id of ids) {
        if (settled.has(id)) continue;
        const s = await status(id);
        if (s.status !== 'running' && s.status !== 'queued') {
          settled.set(id, {
            status: s.status,
            ...(s.error ? { code: s.error.code } : {}),
            afterMs: Date.now() - killedAt,
          });
        }
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    const all = [...settled.values()];
    console.warn(`worker-lost (fast): ${JSON.stringify(all)}`);
    expect(all).toHaveLength(4);
    for (const s of all) expect(s.afterMs, JSON.stringify(all)).toBeLessThan(LOST_WITHIN_MS);
    expect(all.filter((s) => s.status === 'ok')).toHaveLength(2);
    expect(
      all.filter((s) => s.code === 'worker_lost'),
      JSON.stringify(all),
    ).toHaveLength(2);
    // Handed out again, the dead worker's posts were not sent a second time.
    expect(received.sort()).toEqual(['effect 0', 'effect 1', 'effect 2', 'effect 3']);
    expect(services[1]!.output()).toContain('call of a dead worker moved on');
  }, 120_000);
});
