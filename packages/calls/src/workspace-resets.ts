import { randomBytes } from 'node:crypto';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { LuaScript } from './script.js';

/**
 * Admin resets of client workspaces. The gateway never touches a host's files, so a reset is a
 * value per client in one Redis hash: DELETE /v1/workspaces/{client} replaces it with a new
 * **reset id**, `<n>:<random>` (n counts this Redis's resets of the client, for people; the
 * random part makes the id unique for good). Every worker compares it with the id its host's copy
 * of the workspace was made under — before mounting the workspace for a call and in its reaper
 * pass — and deletes a copy made under any *other* id.
 *
 * Difference, not order: Redis may forget the hash (no persistence, a flush, a failover to a
 * replica without it), and a counter restarted from 0 would repeat ids a marker already holds
 * (`1 < 1`: the reset applied nothing). A forgotten hash resets nothing; the next reset gets a
 * fresh id that no marker holds, so it applies everywhere. No clocks need to agree either.
 *
 * A user's workspace (`isolation: user`, named `<client>@<user>`: Keys' `principal`) is
 * compared with both its client's id and its own, joined (`<client's>|<user's>`): a reset of
 * the client changes it for every one of its users without a list of them, a reset of one user
 * (`?user=`) for that user alone.
 */
const SCHEDULE = new LuaScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
local n = 0
if old then n = tonumber(string.match(old, '^(%d+)')) or 0 end
local id = (n + 1) .. ':' .. ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], id)
return id
`);

export interface ScheduledReset {
  /** The id every host compares its copy's marker with. */
  resetId: string;
  /** How many resets of this client this Redis has seen (restarts at 1 if it forgot). */
  generation: number;
}

export class WorkspaceResets {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /**
   * Schedules a reset on every host of a workspace: a client's (and with it all its users'),
   * or, for a name `<client>@<user>`, one user's.
   */
  async schedule(name: string): Promise<ScheduledReset> {
    const resetId = String(
      await SCHEDULE.run(
        this.redis,
        [this.keys.workspaceResets],
        [name, randomBytes(12).toString('hex')],
      ),
    );
    return { resetId, generation: Number(resetId.split(':')[0]) };
  }

  /** The id a workspace's copy is compared with; null when this Redis knows of no reset. */
  async current(name: string): Promise<string | null> {
    const at = name.indexOf('@');
    if (at < 0) return this.redis.hget(this.keys.workspaceResets, name);
    const [client, user] = await this.redis.hmget(
      this.keys.workspaceResets,
      name.slice(0, at),
      name,
    );
    return joined(client ?? null, user ?? null);
  }

  /** The same as `current`, from a map all() read (the reaper: one read for every workspace). */
  idIn(all: ReadonlyMap<string, string>, name: string): string | null {
    const at = name.indexOf('@');
    if (at < 0) return all.get(name) ?? null;
    return joined(all.get(name.slice(0, at)) ?? null, all.get(name) ?? null);
  }

  /** Every client with a reset, for the reaper. */
  async all(): Promise<Map<string, string>> {
    return new Map(Object.entries(await this.redis.hgetall(this.keys.workspaceResets)));
  }
}

/** A user's workspace's id: its client's and its own (null: neither was ever reset). */
function joined(client: string | null, user: string | null): string | null {
  return client === null && user === null ? null : `${client ?? ''}|${user ?? ''}`;
}

/**
 * Workspace resets on a sharded deployment (docs/sharding.md): each client's on its shard.
 * `of` is the resets of a client's shard; `all` reads every shard's, and fails when one does
 * not answer, so the reaper never takes a shard's silence for "no reset" and deletes a workspace.
 */
export function shardedResets(
  of: (clientId: string) => WorkspaceResets,
  every: readonly WorkspaceResets[],
): Pick<WorkspaceResets, 'current' | 'all' | 'idIn'> {
  return {
    current: (name) => of(clientOfSpace(name)).current(name),
    async all() {
      const maps = await Promise.all(every.map((r) => r.all()));
      return new Map(maps.flatMap((m) => [...m]));
    },
    idIn: (all, name) => every[0]!.idIn(all, name),
  };
}

/** The client a workspace or memory is of: `<client>` or `<client>@<user>`. */
export function clientOfSpace(name: string): string {
  const at = name.indexOf('@');
  return at < 0 ? name : name.slice(0, at);
}
