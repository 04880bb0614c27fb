/** The memory tools and their Redis-backed store (`@toolgate/tools/memory`). */
import type { AnyToolSpec } from '@toolgate/registry';
import type { Cluster, Redis } from 'ioredis';

import { MemoryStore, type MemoryStoreOptions } from './store.js';
import { memoryDelete, memorySave, memorySearch } from './tools.js';

/** A connection to one server, a Sentinel-managed master or a Redis Cluster. */
type RedisClient = Redis | Cluster;

export const memoryTools: AnyToolSpec[] = [memorySave, memorySearch, memoryDelete];

/**
 * The `memory` service for ToolContext.services. Give it a `command` connection
 * (createRedis(url, 'command')) and the `Keys` of @toolgate/calls.
 */
/** `redis`: the one Redis, or the one a client's memory is on (its shard, docs/sharding.md). */
export function createMemoryStore(
  redis: RedisClient | ((clientId: string) => RedisClient),
  options: MemoryStoreOptions,
): MemoryStore {
  return new MemoryStore(redis, options);
}

export { MemoryStore, DEFAULT_MEMORY_LIMITS } from './store.js';
export { memorySave, memorySearch, memoryDelete, MAX_SEARCH_RESULTS } from './tools.js';
export type {
  MemoryEntry,
  MemoryKeys,
  MemoryMatch,
  MemoryLimits,
  MemoryStoreOptions,
} from './store.js';
