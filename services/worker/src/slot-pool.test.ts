import { describe, expect, it } from 'vitest';
import { SlotPool } from './slot-pool.js';

describe('SlotPool', () => {
  it('hands a freed slot to the oldest waiting call, whichever consumer took it', async () => {
    const pool = new SlotPool(2, true);
    const [a, b, c] = [{}, {}, {}];
    expect(pool.take(a)).toBeUndefined();
    expect(pool.take(a)).toBeUndefined();
    const order: string[] = [];
    void pool.take(b)!.then(() => order.push('b'));
    void pool.take(c)!.then(() => order.push('c'));
    // a's next completion should not take its own queue's next call: b and c wait.
    expect(pool.contended(a)).toBe(true);
    pool.release();
    await Promise.resolve();
    expect(order).toEqual(['b']);
    expect(pool.free).toBe(0);
    pool.release();
    await Promise.resolve();
    expect(order).toEqual(['b', 'c']);
    expect(pool.contended(a)).toBe(false);
  });

  it('wakes parked loops once a slot is free, and is never contended with one consumer', async () => {
    const pool = new SlotPool(1);
    const a = {};
    pool.take(a);
    let woke = false;
    void pool.whenFree(a).then(() => (woke = true));
    expect(pool.contended(a)).toBe(false);
    pool.release();
    await Promise.resolve();
    expect(woke).toBe(true);
    expect(pool.free).toBe(1);
  });

  it('lets a stopping consumer withdraw its waiting call, and passes no slot above its size', () => {
    const pool = new SlotPool(1, true);
    const [a, b] = [{}, {}];
    pool.take(a);
    pool.force();
    void pool.take(b);
    expect(pool.withdraw(b)).toBe(true);
    expect(pool.withdraw(b)).toBe(false);
    pool.release();
    pool.release();
    expect(pool.free).toBe(1);
  });
});
