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

  /** Schedules a reset of the client's workspace on every host. */
  async schedule(clientId: string): Promise<ScheduledReset> {
    const resetId = String(
      await SCHEDULE.run(
        this.redis,
        [this.keys.workspaceResets],
        [clientId, randomBytes(12).toString('hex')],
      ),
    );
    return { resetId, generation: Number(resetId.split(':')[0]) };
  }

  /** The id of the client's last reset; null when this Redis knows of none. */
  async current(clientId: string): Promise<string | null> {
    return this.redis.hget(this.keys.workspaceResets, clientId);
  }

  /** Every client with a reset, for the reaper. */
  async all(): Promise<Map<string, string>> {
    return new Map(Object.entries(await this.redis.hgetall(this.keys.workspaceResets)));
  }
}
