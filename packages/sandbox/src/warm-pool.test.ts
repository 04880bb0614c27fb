/**
 * The warm pool's refill order, on its own: `start` hands out plain records (the docker
 * driver's containers are tested against a real engine in docker.test.ts).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { WarmPool, type Pooled } from './warm-pool.js';

interface Item extends Pooled {
  n: number;
}

const pools: WarmPool<Item>[] = [];

function pool(size: number, refillDelayMs = 60_000) {
  let started = 0;
  const p = new WarmPool<Item>({
    key: 'python',
    size,
    start: () => Promise.resolve({ n: ++started, createdAt: Date.now(), dead: false }),
    dispose: () => Promise.resolve(),
    canStart: () => true,
    onStartFailed: () => undefined,
    refillDelayMs,
  });
  pools.push(p);
  return { p, started: () => started };
}

/** Lets the resolved starts land in the pool. */
const settle = () => new Promise((r) => setTimeout(r, 10));

afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
});

describe('WarmPool', () => {
  it('starts a taken sandbox’s replacement once its call is over, not while it runs', async () => {
    const { p, started } = pool(2);
    p.topUp();
    await settle();
    expect([p.readyCount, started()]).toEqual([2, 2]);

    const item = await p.acquire();
    await settle();
    // The call runs: nothing starts beside it.
    expect([p.readyCount, started()]).toEqual([1, 2]);

    p.refill();
    await settle();
    expect([p.readyCount, started()]).toEqual([2, 3]);
    expect(item.n).toBe(1);
  });

  it('starts the replacement of a long call after refillDelayMs without waiting for its end', async () => {
    const { p, started } = pool(2, 30);
    p.topUp();
    await settle();
    await p.acquire();
    await new Promise((r) => setTimeout(r, 80));
    expect([p.readyCount, started()]).toEqual([2, 3]);
  });

  it('starts every owed replacement at once when the last ready sandbox is taken', async () => {
    const { p, started } = pool(3);
    p.topUp();
    await settle();
    await p.acquire();
    await p.acquire();
    await settle();
    expect([p.readyCount, started()]).toEqual([1, 3]);

    await p.acquire();
    await settle();
    // The next call would wait for a start: all three replacements are under way.
    expect([p.readyCount, started()]).toEqual([3, 6]);
    // The calls' ends start nothing more: their replacements were paid already.
    p.refill();
    p.refill();
    p.refill();
    await settle();
    expect([p.readyCount, started()]).toEqual([3, 6]);
  });

  it('serves a call that finds the pool empty with the next start', async () => {
    const { p, started } = pool(1);
    const item = await p.acquire();
    expect(item.n).toBe(1);
    await settle();
    expect([p.readyCount, started()]).toEqual([1, 2]);
  });
});
