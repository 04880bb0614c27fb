import { describe, expect, it } from 'vitest';
import { ConfigError, checkConfig, parseConfig } from './load.js';
import { HOME_SHARD, ShardMap } from './shards.js';

const key = 'k'.repeat(16);
const clients = (n: number, extra: (i: number) => object = () => ({})) =>
  Array.from({ length: n }, (_, i) => ({ id: `c${i}`, key, ...extra(i) }));
const three = [
  { id: 's0', url: 'redis://127.0.0.1:7000', home: true },
  { id: 's1', url: 'redis://127.0.0.1:7001' },
  { id: 's2', sentinel: { name: 'm2', nodes: ['127.0.0.1:26379'] } },
];

function problem(doc: object): string {
  try {
    parseConfig(doc);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    const e = err as ConfigError;
    // checkConfig finds the same problem, with the other problems of the file.
    expect(checkConfig(doc).problems.map((p) => p.path)).toContain(e.field);
    return e.message.replace('invalid configuration: ', '');
  }
  throw new Error('the configuration was accepted');
}

describe('redis.shards', () => {
  it('without shards, the redis section is the one home shard every client is on', () => {
    const map = new ShardMap(parseConfig({ clients: clients(3) }));
    expect(map.list).toHaveLength(1);
    expect(map.home.id).toBe(HOME_SHARD);
    expect(map.sharded).toBe(false);
    expect(map.of('c2')).toBe(map.home);
    expect(map.home.redis.prefix).toBe('toolgate');
  });

  it('each shard is a redis section of its own, with the prefix and durability it sets or the defaults', () => {
    const config = parseConfig({
      redis: {
        prefix: 'tg',
        shards: [...three, { id: 's3', cluster: { nodes: ['127.0.0.1:7100'] }, prefix: 'tg-s3' }],
      },
      clients: clients(2, (i) => (i === 0 ? { shard: 's2' } : {})),
    });
    const map = new ShardMap(config);
    expect(map.list.map((s) => [s.id, s.home, s.redis.prefix])).toEqual([
      ['s0', true, 'tg'],
      ['s1', false, 'tg'],
      ['s2', false, 'tg'],
      ['s3', false, 'tg-s3'],
    ]);
    expect(map.byId('s1')!.redis).toEqual({
      url: 'redis://127.0.0.1:7001',
      durability: { replicas: 0, timeoutMs: 1000 },
      prefix: 'tg',
    });
    expect(map.of('c0').id).toBe('s2');
  });

  it('spreads clients by a stable hash: 300 clients land within 20 % of even, and a fourth shard takes only clients it wins', () => {
    const config = parseConfig({ redis: { shards: three }, clients: clients(300) });
    const map = new ShardMap(config);
    const count = new Map<string, number>();
    for (const c of config.clients)
      count.set(map.of(c.id).id, (count.get(map.of(c.id).id) ?? 0) + 1);
    for (const id of ['s0', 's1', 's2']) expect(count.get(id)).toBeGreaterThanOrEqual(80);
    // The same answer from another process's map.
    const again = new ShardMap(parseConfig({ redis: { shards: three }, clients: clients(300) }));
    expect(config.clients.every((c) => again.of(c.id).id === map.of(c.id).id)).toBe(true);
    const grown = new ShardMap(
      parseConfig({
        redis: { shards: [...three, { id: 's3', url: 'redis://127.0.0.1:7003' }] },
        clients: clients(300),
      }),
    );
    const moved = config.clients.filter((c) => grown.of(c.id).id !== map.of(c.id).id);
    expect(moved.length).toBeGreaterThan(30);
    expect(moved.every((c) => grown.of(c.id).id === 's3')).toBe(true);
  });

  it('the first shard is home when none says so', () => {
    const map = new ShardMap(
      parseConfig({ redis: { shards: three.map(({ home: _h, ...s }) => s) } }),
    );
    expect(map.home.id).toBe('s0');
  });

  it('refuses a configuration it could not place data by, naming the field', () => {
    expect(
      problem({ redis: { shards: three }, clients: clients(1, () => ({ shard: 's9' })) }),
    ).toBe(
      '/clients/0/shard: client "c0" names shard "s9", which redis.shards does not have (s0, s1, s2)',
    );
    expect(problem({ clients: clients(1, () => ({ shard: 's1' })) })).toBe(
      '/clients/0/shard: client "c0" names shard "s1", but redis.shards is not set',
    );
    expect(problem({ redis: { url: 'redis://127.0.0.1:6379', shards: three } })).toMatch(
      /^\/redis\/url: set either redis.shards or redis.url \(REDIS_URL\), not both/,
    );
    expect(problem({ redis: { shards: [...three, { id: 's1', url: 'redis://h:1' }] } })).toBe(
      '/redis/shards/3/id: duplicate shard id "s1"',
    );
    expect(problem({ redis: { shards: [{ id: 's0' }] } })).toBe(
      '/redis/shards/0: shard "s0" needs exactly one of url, sentinel and cluster',
    );
    expect(problem({ redis: { shards: [three[0], { ...three[1], home: true }] } })).toBe(
      '/redis/shards/1/home: only one shard is home; got "s0" and "s1"',
    );
    expect(problem({ redis: { shards: [three[0], { id: 'again', url: three[0]!.url }] } })).toMatch(
      /^\/redis\/shards\/1: shards "s0" and "again" are the same Redis with the same prefix/,
    );
    expect(problem({ redis: { shards: [{ id: 'Bad id', url: 'redis://h:1' }] } })).toMatch(
      /^\/redis\/shards\/0\/id/,
    );
  });
});
