import { createHash } from 'node:crypto';
import type { Config, RedisConfig } from './schema.js';

/**
 * One Redis deployment some clients' data lives on (docs/sharding.md): its id, whether it is
 * the home shard (deployment-wide data), and its connection as a `redis` section of its own, so
 * everything built on one Redis today is built on a shard the same way.
 */
export interface Shard {
  id: string;
  home: boolean;
  redis: ShardRedis;
}

/** A shard's Redis: the `redis` section without `shards`. */
export type ShardRedis = Omit<RedisConfig, 'shards'>;

/** The id of the one shard a deployment without `redis.shards` has. */
export const HOME_SHARD = 'home';

/**
 * The shards of a configuration and which one each client's data lives on. Without
 * `redis.shards` there is one, `home`: the `redis` section itself.
 */
export class ShardMap {
  readonly list: readonly Shard[];
  readonly home: Shard;
  private readonly byClient = new Map<string, Shard>();

  constructor(config: Pick<Config, 'redis' | 'clients'>) {
    const { shards, ...base } = config.redis;
    if (shards === undefined) {
      this.list = [{ id: HOME_SHARD, home: true, redis: base }];
    } else {
      const homeIndex = Math.max(
        0,
        shards.findIndex((s) => s.home === true),
      );
      this.list = shards.map(({ id, home: _home, prefix, ...target }, i) => ({
        id,
        home: i === homeIndex,
        redis: { ...target, prefix: prefix ?? base.prefix },
      }));
    }
    this.home = this.list.find((s) => s.home)!;
    for (const client of config.clients) {
      const shard =
        client.shard === undefined ? undefined : this.list.find((s) => s.id === client.shard);
      if (shard) this.byClient.set(client.id, shard);
    }
  }

  /** More than one shard: what is per client is no longer all in one place. */
  get sharded(): boolean {
    return this.list.length > 1;
  }

  byId(id: string): Shard | undefined {
    return this.list.find((s) => s.id === id);
  }

  /**
   * The shard a client's data lives on: its `shard`, else the one its id hashes to
   * (rendezvous hashing: adding a shard moves only the clients the new one wins).
   */
  of(clientId: string): Shard {
    const pinned = this.byClient.get(clientId);
    if (pinned) return pinned;
    if (this.list.length === 1) return this.list[0]!;
    let best = this.list[0]!;
    let bestScore = '';
    for (const shard of this.list) {
      const score = createHash('sha256').update(`${shard.id}\0${clientId}`).digest('hex');
      if (score > bestScore) {
        best = shard;
        bestScore = score;
      }
    }
    return best;
  }
}

/** What is wrong with `redis.shards` and `clients[].shard`, by path. */
export function shardProblems(
  config: Pick<Config, 'redis' | 'clients'>,
): { path: string; message: string }[] {
  const problems: { path: string; message: string }[] = [];
  const { shards } = config.redis;
  if (shards === undefined) {
    config.clients.forEach((c, i) => {
      if (c.shard !== undefined && c.shard !== HOME_SHARD)
        problems.push({
          path: `/clients/${i}/shard`,
          message: `client "${c.id}" names shard "${c.shard}", but redis.shards is not set`,
        });
    });
    return problems;
  }
  const given = (['url', 'sentinel', 'cluster'] as const).filter(
    (k) => config.redis[k] !== undefined,
  );
  if (given.length > 0)
    problems.push({
      path: `/redis/${given[0]}`,
      message: `set either redis.shards or redis.${given[0]}${given[0] === 'url' ? ' (REDIS_URL)' : ''}, not both: each shard says where its Redis is`,
    });
  const ids = new Set<string>();
  const places = new Map<string, string>();
  shards.forEach((shard, i) => {
    if (ids.has(shard.id))
      problems.push({ path: `/redis/shards/${i}/id`, message: `duplicate shard id "${shard.id}"` });
    ids.add(shard.id);
    const targets = (['url', 'sentinel', 'cluster'] as const).filter((k) => shard[k] !== undefined);
    if (targets.length !== 1) {
      problems.push({
        path: `/redis/shards/${i}`,
        message: `shard "${shard.id}" needs exactly one of url, sentinel and cluster${targets.length > 1 ? `; got ${targets.join(' and ')}` : ''}`,
      });
      return;
    }
    // Two shards on one Redis under one prefix would be one shard counted twice.
    const where = JSON.stringify([
      shard.url ?? shard.sentinel?.name ?? '',
      shard.sentinel?.nodes ?? shard.cluster?.nodes ?? [],
      shard.prefix ?? config.redis.prefix,
    ]);
    const other = places.get(where);
    if (other !== undefined)
      problems.push({
        path: `/redis/shards/${i}`,
        message: `shards "${other}" and "${shard.id}" are the same Redis with the same prefix: give one another Redis or another prefix`,
      });
    else places.set(where, shard.id);
  });
  const homes = shards.filter((s) => s.home === true);
  if (homes.length > 1)
    problems.push({
      path: `/redis/shards/${shards.indexOf(homes[1]!)}/home`,
      message: `only one shard is home; got ${homes.map((s) => `"${s.id}"`).join(' and ')}`,
    });
  config.clients.forEach((c, i) => {
    if (c.shard !== undefined && !ids.has(c.shard))
      problems.push({
        path: `/clients/${i}/shard`,
        message: `client "${c.id}" names shard "${c.shard}", which redis.shards does not have (${[...ids].join(', ')})`,
      });
  });
  return problems;
}
