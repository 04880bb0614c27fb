/**
 * memory_search runs synchronously on a worker every tenant shares: a client that fills its
 * store with words built to blow up prefix and typo matching must not buy seconds of CPU per
 * query (issue 10).
 */
import { randomUUID } from 'node:crypto';
import { ToolError } from '@toolgate/registry';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { DEFAULT_MEMORY_LIMITS, MemoryStore, type MemoryKeys } from './index.js';

let redis: Redis;
let prefix: string;
let keys: MemoryKeys;

beforeAll(() => {
  redis = new Redis(inject('redisUrl'));
  prefix = `memcost${randomUUID().slice(0, 8)}`;
  // Keys (@toolgate/calls) builds these in the services; this package does not depend on it.
  keys = {
    memory: (c) => ({ entries: `${prefix}:memory:{${c}}`, version: `${prefix}:memory:{${c}}:v` }),
  };
});
afterAll(async () => {
  const left = await redis.keys(`${prefix}:*`);
  if (left.length) await redis.del(...left);
  redis.disconnect();
});

/** CPU milliseconds of `fn` (its synchronous part and the callbacks it awaits). */
async function cpuMs<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const before = process.cpuUsage();
  const result = await fn();
  const used = process.cpuUsage(before);
  return [result, (used.user + used.system) / 1000];
}

async function codeOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(ToolError);
    return (err as ToolError).code;
  }
}

let seed = 1;
/** Deterministic letters, so a failure reproduces. */
function letters(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    s += String.fromCharCode(97 + (seed % 26));
  }
  return s;
}

/** A note of distinct words that all start with "aaa": a prefix query "aaa" would match them all. */
function hostileNote(length: number): string {
  const words: string[] = [];
  let size = 0;
  while (size < length - 12) {
    const w = `aaa${letters(6)}`;
    words.push(w);
    size += w.length + 1;
  }
  return words.join(' ');
}

describe('memory search cost at the caps', () => {
  it('a store filled to its caps with hostile words answers a worst-case query fast', async () => {
    const store = new MemoryStore(redis, { keys });
    const client = 'hog';
    const { maxTextLength, maxTotalBytes } = DEFAULT_MEMORY_LIMITS;
    let saved = 0;
    for (;;) {
      const code = await codeOf(store.save(client, hostileNote(maxTextLength), ['aaatag']));
      if (code !== undefined) {
        expect(code).toBe('memory_full');
        break;
      }
      saved++;
    }
    // Filled to the byte cap with full-size notes.
    expect(saved).toBeGreaterThan(maxTotalBytes / (maxTextLength + 200) - 2);
    const bytes = (await redis.hvals(`${prefix}:memory:{${client}}`)).reduce(
      (n, v) => n + Buffer.byteLength(v),
      0,
    );
    expect(bytes).toBeLessThanOrEqual(maxTotalBytes);

    // The first search builds the index (in slices); later ones reuse it.
    const [first, buildMs] = await cpuMs(() => store.search(client, 'aaatag', 1));
    expect(first.length).toBeGreaterThan(0);

    const queries = [
      'aaa', // a prefix of every word
      'aaa aab aac aad aae aaf aag aah',
      'aaaqwerty aaazxcvbn aaaasdfgh aaapoiuyt aaalkjhgf aaammnnbb aaarrttyy aaauuiioo', // typos
      `${first[0]!.text.split(' ').slice(0, 8).join(' ')}`, // exact words of a note
      'aaatag',
    ];
    const times: number[] = [];
    for (const query of queries) {
      const [results, ms] = await cpuMs(() => store.search(client, query, 50));
      expect(Array.isArray(results)).toBe(true);
      times.push(ms);
    }
    // Before these bounds one such query cost seconds of CPU (docs/policy-budgets.md).
    expect(Math.max(...times), `build ${buildMs} ms, queries ${times.join(', ')} ms`).toBeLessThan(
      200,
    );
  });

  it('refuses queries with too many words and saves past the caps, with clear codes', async () => {
    const store = new MemoryStore(redis, { keys, maxEntries: 3, maxTotalBytes: 2_500 });
    const words = Array.from({ length: DEFAULT_MEMORY_LIMITS.maxQueryTerms + 1 }, (_, i) =>
      letters(4 + (i % 3)),
    );
    expect(await codeOf(store.search('c1', words.join(' ')))).toBe('query_too_long');
    // Repeated words count once: this is one word.
    expect(await codeOf(store.search('c1', 'tea '.repeat(100)))).toBeUndefined();

    await store.save('c1', 'x'.repeat(900));
    await store.save('c1', 'y'.repeat(900));
    expect(await codeOf(store.save('c1', 'z'.repeat(900)))).toBe('memory_full');
    expect(await codeOf(store.save('c1', 'short note'))).toBeUndefined();
    expect(await codeOf(store.save('c1', 'one more'))).toBe('memory_full'); // maxEntries
  });

  it("applies another process's saves and deletes to a cached index", async () => {
    const mine = new MemoryStore(redis, { keys });
    const other = new MemoryStore(redis, { keys });
    const { entry } = await mine.save('c2', 'the staging database is called heron');
    expect((await mine.search('c2', 'heron'))[0]?.id).toBe(entry.id);
    await other.save('c2', 'the production database is called osprey');
    expect((await mine.search('c2', 'osprey'))[0]?.text).toMatch(/osprey/);
    await other.delete('c2', entry.id);
    expect(await mine.search('c2', 'heron')).toEqual([]);
    expect((await mine.search('c2', 'database')).map((m) => m.text)).toEqual([
      'the production database is called osprey',
    ]);
  });
});
