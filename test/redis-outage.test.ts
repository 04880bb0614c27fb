/**
 * Issue 11: a Redis outage under load leaks nothing. A real redis-server is stopped for
 * OUTAGE_MS while calls keep coming — through the gateway (what a user sees: 503s, then 200s)
 * and straight at a Dispatcher the way the pipeline drives it — then started again on the same
 * port. Listener counts on the reply connection, the command connection and the queues, and
 * the number of live timers, must stay bounded, not grow with every call of the outage, and
 * the heap after the outage must be back near where it was.
 */
import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { CallStore, Dispatcher, Keys, createRedis, waitReady, type CallJob } from '@toolgate/calls';
import { afterAll, describe, expect, it } from 'vitest';
import { startRedisServer, type RedisServer } from './support/redis-server.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

/** A minute, as an operator's Redis failover or restart may take. */
const OUTAGE_MS = 60_000;

/** The JavaScript heap after a full collection (gc exposed at run time, no flag needed). */
v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const heapAfterGc = () => {
  gc();
  return process.memoryUsage().heapUsed;
};

/** The largest listener count of any one event on the emitter. */
function maxListeners(emitter: EventEmitter): number {
  return Math.max(0, ...emitter.eventNames().map((name) => emitter.listenerCount(name)));
}

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

let redis: RedisServer | undefined;
let stack: Stack | undefined;
afterAll(async () => {
  await stack?.close();
  await redis?.stop();
});

describe('a Redis outage under load', () => {
  it(
    'answers 503 during the outage, recovers after it, and leaks no listeners or timers',
    async () => {
      // Its own redis-server, so stopping it disturbs no other test file.
      redis = await startRedisServer();
      const { port, url } = redis;
      const warnings: string[] = [];
      const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
      process.on('warning', onWarning);

      stack = await startStack({
        config: {
          redis: { url, prefix: `o${randomUUID().slice(0, 6)}` },
          clients: [
            { id: 'alice', key: KEYS.alice, tools: ['*'], rateLimit: { perMinute: 1_000_000 } },
          ],
        },
      });
      // The stack's prefix, so its worker answers the calls this dispatcher enqueues.
      const keys = new Keys(stack.config.redis.prefix);
      const connection = createRedis(url, 'command');
      const replies = createRedis(url, 'blocking');
      const dispatcher = new Dispatcher(
        connection,
        replies,
        keys,
        new CallStore(connection, keys, 60),
      );
      const emitters: Record<string, EventEmitter> = {
        replies,
        connection,
      };
      const counts = () =>
        Object.fromEntries(Object.entries(emitters).map(([k, e]) => [k, maxListeners(e)]));
      expect(await dispatcher.ready(5000)).toBe(true);
      await waitReady(connection);
      const before = { listeners: counts(), timers: timers() };
      const heapBefore = heapAfterGc();

      let phase: 'up' | 'down' | 'back' = 'up';
      let stop = false;
      const answers = {
        up: new Map<string, number>(),
        down: new Map<string, number>(),
        back: new Map<string, number>(),
      };
      let slowest = 0;
      // Users: synchronous calls through the gateway.
      const user = async () => {
        while (!stop) {
          const at = phase;
          const started = Date.now();
          const res = await stack!.call('/tools/calculator/execute', {
            json: { expression: '6*7' },
          });
          const body = (await res.json()) as { error?: { code: string } };
          const label = `${res.status}${body.error ? ` ${body.error.code}` : ''}${res.status === 503 && !res.headers.get('retry-after') ? ' (no Retry-After)' : ''}`;
          answers[at].set(label, (answers[at].get(label) ?? 0) + 1);
          slowest = Math.max(slowest, Date.now() - started);
        }
      };
      // The pipeline's use of the dispatcher: wait for the reply channel, register for the
      // outcome, enqueue, read the call's state (sync calls, retries, GET /v1/calls/{id}).
      let refused = 0;
      const caller = async () => {
        while (!stop) {
          const id = randomUUID();
          await dispatcher.ready(200);
          const job: CallJob = {
            id,
            tool: 'calculator',
            args: { expression: '1' },
            // Not alice: a fast enqueue is also the admission, and these 100 callers must not
            // use up the share of the users above.
            clientId: 'callers',
            acceptedAt: Date.now(),
            replyTo: dispatcher.replyChannel,
          };
          const outcome = dispatcher.expect(id, 20_000);
          // A fast call: admitted and queued in one script (the fast lane; no limit here).
          const accepted = await dispatcher.enqueue(job, 'fast', 0, 60_000).then(
            () => true,
            () => false,
          );
          // Accepted: the stack's worker answers it. Refused: the pipeline answers 503 and
          // walks away from the wait; a retry reads the call's state, which fails too.
          if (accepted) await outcome;
          else {
            refused++;
            await dispatcher.waitFor(id, 1000).catch(() => undefined);
          }
        }
      };
      const load = Array.from({ length: 8 }, user);

      await new Promise((r) => setTimeout(r, 500));
      await redis.stop();
      phase = 'down';
      // Dispatcher callers start with the outage: no call of theirs is in flight when it begins.
      load.push(...Array.from({ length: 100 }, caller));
      const samples: { listeners: Record<string, number>; timers: number }[] = [];
      for (let t = 0; t < OUTAGE_MS; t += 1000) {
        await new Promise((r) => setTimeout(r, 1000));
        samples.push({ listeners: counts(), timers: timers() });
      }
      const outageCalls = refused;
      const heapDown = process.memoryUsage().heapUsed;
      redis = await startRedisServer(port);
      phase = 'back';
      // Recovered: a call answers 200 again within a few seconds.
      let recovered = false;
      for (let i = 0; i < 100 && !recovered; i++) {
        recovered = (answers.back.get('200') ?? 0) > 0;
        await new Promise((r) => setTimeout(r, 100));
      }
      stop = true;
      await Promise.all(load);
      await new Promise((r) => setTimeout(r, 1500)); // the last polls and batched writes end
      const after = { listeners: counts(), timers: timers() };
      const heapAfter = heapAfterGc();
      // Everything measured, shown with any failed assertion below.
      const measured = JSON.stringify({
        before,
        during: samples,
        after,
        outageCalls,
        answers: Object.fromEntries(
          Object.entries(answers).map(([k, v]) => [k, Object.fromEntries(v)]),
        ),
        heapMbDuringOutage: Math.round(heapDown / 1e6),
        heapMbBefore: Math.round(heapBefore / 1e6),
        heapMbAfter: Math.round(heapAfter / 1e6),
        slowestMs: slowest,
      });
      await dispatcher.close();
      connection.disconnect();
      process.off('warning', onWarning);

      // What a user sees: 503 unavailable with Retry-After during the outage, never a 500 or a
      // hang, and 200s once Redis is back.
      expect(recovered).toBe(true);
      expect(
        [...answers.down.keys()].every((k) => k === '503 unavailable' || k === '200'),
        measured,
      ).toBe(true);
      expect(answers.down.get('503 unavailable')).toBeGreaterThan(0);
      expect(
        [...answers.back.keys()].filter((k) => !['200', '503 unavailable'].includes(k)),
      ).toEqual([]);
      expect(slowest).toBeLessThan(10_000);
      expect(
        warnings.filter((w) => w.includes('MaxListenersExceeded')),
        measured,
      ).toEqual([]);

      // Many calls were refused by the dispatcher during the outage...
      expect(outageCalls, measured).toBeGreaterThan(100);
      // ...and no emitter gained a listener per call: at most one more than before on any event.
      for (const s of samples) {
        for (const [name, n] of Object.entries(s.listeners)) {
          expect(n, `${name} listeners during the outage: ${measured}`).toBeLessThanOrEqual(
            before.listeners[name]! + 1,
          );
        }
      }
      expect(after.listeners, measured).toEqual(before.listeners);
      // Once the load stops nothing is left waiting: no timers of calls refused in the outage.
      expect(after.timers, measured).toBeLessThanOrEqual(before.timers + 10);
      // ...and the calls of the outage left nothing behind in memory (tens of thousands of
      // refused requests: a closure kept per call would show as megabytes).
      expect(heapAfter - heapBefore, measured).toBeLessThan(16 * 1024 * 1024);
    },
    OUTAGE_MS + 60_000,
  );
});
