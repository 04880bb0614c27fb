import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Keys, principal } from './keys.js';
import { createRedis, type RedisClient } from './redis.js';
import { WorkspaceResets } from './workspace-resets.js';

let redis: RedisClient;
let resets: WorkspaceResets;
beforeAll(() => {
  redis = createRedis(inject('redisUrl'), 'command');
  resets = new WorkspaceResets(redis, new Keys(`t${randomUUID().slice(0, 8)}`));
});
afterAll(() => redis.disconnect());

describe('WorkspaceResets', () => {
  it("a user's workspace follows its client's resets and its own; the reaper's map reads the same", async () => {
    const ann = principal('carol', 'ann');
    const ben = principal('carol', 'ben');
    expect(await resets.current(ann)).toBeNull();

    await resets.schedule('carol');
    const afterClient = await resets.current(ann);
    expect(afterClient).not.toBeNull();
    expect(await resets.current(ben)).not.toBeNull();

    await resets.schedule(ann);
    const afterUser = await resets.current(ann);
    expect(afterUser).not.toBe(afterClient);
    // Ben's did not change with Ann's reset, and another client's users are untouched.
    expect(await resets.current(ben)).toBe(afterClient);
    expect(await resets.current(principal('dora', 'ann'))).toBeNull();

    const all = await resets.all();
    for (const name of ['carol', ann, ben, principal('dora', 'ann')]) {
      expect(resets.idIn(all, name), name).toBe(await resets.current(name));
    }
  });
});
