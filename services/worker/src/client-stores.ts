import {
  Keys,
  WorkspaceResets,
  clientOfSpace,
  createRedis,
  shardedResets,
  type RedisClient,
} from '@toolgate/calls';
import { ShardMap, type Config } from '@toolgate/config';
import type { WorkspaceResetSource } from '@toolgate/sandbox';
import { createMemoryStore, type MemoryStore } from '@toolgate/tools';

/**
 * The stores tools reach outside the queues, each client's on its shard (docs/sharding.md): the
 * memory tool's entries and the workspaces' admin resets; and the home shard's connection (the
 * sandbox reaper asks the heartbeats there whether a container's worker lives).
 */
export interface ClientStores {
  memory: MemoryStore;
  resets: WorkspaceResetSource;
  home: { redis: RedisClient; keys: Keys };
  /** Disconnects every shard's connection. */
  close(): void;
}

export function openClientStores(config: Config): ClientStores {
  const shards = new ShardMap(config);
  const connections = new Map(
    shards.list.map((s) => {
      const keys = Keys.for(s.redis);
      const redis = createRedis(s.redis, 'command');
      return [s.id, { redis, keys, resets: new WorkspaceResets(redis, keys) }] as const;
    }),
  );
  /** A client's, or `<client>@<user>`'s (a user's memory and workspace follow its client). */
  const of = (space: string) => connections.get(shards.of(clientOfSpace(space)).id)!;
  const home = connections.get(shards.home.id)!;
  return {
    memory: createMemoryStore((space) => of(space).redis, {
      keys: { memory: (space) => of(space).keys.memory(space) },
    }),
    resets: shards.sharded
      ? shardedResets(
          (client) => of(client).resets,
          [...connections.values()].map((c) => c.resets),
        )
      : home.resets,
    home: { redis: home.redis, keys: home.keys },
    close() {
      for (const c of connections.values()) c.redis.disconnect();
    },
  };
}
