import { randomUUID } from 'node:crypto';
import type { ToolContext } from '@toolgate/registry';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import {
  MemoryStore,
  createMemoryStore,
  memoryDelete,
  memorySave,
  memorySearch,
  type MemoryKeys,
} from './index.js';

let redis: Redis;
let prefix: string;
let store: MemoryStore;
let keys: MemoryKeys;

beforeAll(() => {
  redis = new Redis(inject('redisUrl'));
  prefix = `mem${randomUUID().slice(0, 8)}`;
  // Keys (@toolgate/calls) builds these in the services; this package does not depend on it.
  keys = {
    memory: (c) => ({ entries: `${prefix}:memory:{${c}}`, version: `${prefix}:memory:{${c}}:v` }),
  };
  store = createMemoryStore(redis, { keys, maxEntries: 5, maxTextLength: 200 });
});
afterAll(async () => {
  const left = await redis.keys(`${prefix}:*`);
  if (left.length) await redis.del(...left);
  redis.disconnect();
});

const ctx = (clientId: string, services: ToolContext['services'] = { memory: store }) => ({
  callId: randomUUID(),
  clientId,
  signal: new AbortController().signal,
  services,
});

describe('memory tools', () => {
  it('finds what was saved, ranked, despite typos and partial words', async () => {
    const c = ctx('alice');
    await memorySave.handler({ text: 'The user prefers metric units and Celsius' }, c);
    await memorySave.handler(
      { text: 'Project Falcon deadline is March 3rd', tags: ['project-falcon', 'deadlines'] },
      c,
    );
    await memorySave.handler({ text: 'The user is allergic to peanuts' }, c);

    const typo = await memorySearch.handler({ query: 'celcius' }, c);
    expect(typo.results[0]?.text).toBe('The user prefers metric units and Celsius');

    const partial = await memorySearch.handler({ query: 'falc deadlin' }, c);
    expect(partial.results[0]).toMatchObject({
      text: 'Project Falcon deadline is March 3rd',
      tags: ['project-falcon', 'deadlines'],
      id: expect.any(String),
      savedAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
      score: expect.any(Number),
    });

    const limited = await memorySearch.handler({ query: 'user', limit: 1 }, c);
    expect(limited.results).toHaveLength(1);
    expect((await memorySearch.handler({ query: 'zebra' }, c)).results).toEqual([]);
  });

  it('keeps each client to its own entries', async () => {
    await memorySave.handler({ text: 'bob likes espresso' }, ctx('bob'));
    expect((await memorySearch.handler({ query: 'espresso' }, ctx('carol'))).results).toEqual([]);
    expect((await memorySearch.handler({ query: 'espresso' }, ctx('bob'))).results).toHaveLength(1);
  });

  it('survives a restart: a new store on a new connection sees the entries', async () => {
    await memorySave.handler(
      { text: 'the office wifi password is in the blue binder' },
      ctx('dave'),
    );
    const fresh = new Redis(inject('redisUrl'));
    try {
      const restarted = new MemoryStore(fresh, { keys });
      const found = await restarted.search('dave', 'wifi binder');
      expect(found[0]?.text).toBe('the office wifi password is in the blue binder');
    } finally {
      fresh.disconnect();
    }
  });

  it('another process saving is seen at the next search (version check, no stale index)', async () => {
    const other = new MemoryStore(redis, { keys });
    expect(await store.search('erin', 'kiwi')).toEqual([]);
    await other.save('erin', 'erin grows kiwi fruit');
    expect((await store.search('erin', 'kiwi'))[0]?.text).toBe('erin grows kiwi fruit');
    const [hit] = await store.search('erin', 'kiwi');
    await other.delete('erin', hit!.id);
    expect(await store.search('erin', 'kiwi')).toEqual([]);
  });

  it('bounds each client: too long text and a full memory are clear errors', async () => {
    const c = ctx('frank');
    await expect(memorySave.handler({ text: 'x'.repeat(201) }, c)).rejects.toMatchObject({
      name: 'ToolError',
      code: 'text_too_long',
      message: expect.stringContaining('at most 200'),
    });
    for (let i = 0; i < 5; i++) await memorySave.handler({ text: `note ${i}` }, c);
    await expect(memorySave.handler({ text: 'one too many' }, c)).rejects.toMatchObject({
      code: 'memory_full',
      message: expect.stringContaining('memory_delete'),
    });
    const [first] = (await memorySearch.handler({ query: 'note' }, c)).results;
    expect(await memoryDelete.handler({ id: first!.id }, c)).toEqual({ deleted: first!.id });
    await expect(memorySave.handler({ text: 'fits again' }, c)).resolves.toMatchObject({
      entries: 5,
    });
    await expect(memoryDelete.handler({ id: first!.id }, c)).rejects.toMatchObject({
      code: 'not_found',
    });
  });

  it('concurrent saves never pass the bound', async () => {
    const c = ctx('grace');
    const results = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => memorySave.handler({ text: `parallel ${i}` }, c)),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(5);
    expect(await store.count('grace')).toBe(5);
  });

  it('without a memory service the tools fail with unavailable', async () => {
    await expect(memorySearch.handler({ query: 'x' }, ctx('alice', {}))).rejects.toMatchObject({
      code: 'unavailable',
    });
  });
});
