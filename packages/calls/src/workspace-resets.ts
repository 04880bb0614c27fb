import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';

/**
 * Admin resets of client workspaces. The gateway never touches a host's files, so a reset is a
 * generation counter per client in one Redis hash: DELETE /v1/workspaces/{client} increments
 * it; every worker compares it with the generation its host's copy of the workspace was made
 * under, before mounting the workspace for a call and in its reaper pass, and deletes an older
 * copy. A counter, not a timestamp: no gateway and worker clocks need to agree, and a copy made
 * after the reset carries the new generation, so it is never wiped twice.
 */
export class WorkspaceResets {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /** Schedules a reset of the client's workspace on every host; returns the new generation. */
  schedule(clientId: string): Promise<number> {
    return this.redis.hincrby(this.keys.workspaceResets, clientId, 1);
  }

  /** 0 when the client's workspace was never reset. */
  async generation(clientId: string): Promise<number> {
    return Number((await this.redis.hget(this.keys.workspaceResets, clientId)) ?? 0);
  }

  async all(): Promise<Map<string, number>> {
    const entries = await this.redis.hgetall(this.keys.workspaceResets);
    return new Map(Object.entries(entries).map(([client, gen]) => [client, Number(gen)]));
  }
}
