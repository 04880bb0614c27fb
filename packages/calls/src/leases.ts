import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { LuaScript } from './script.js';
import type { QueueKind } from './types.js';

/**
 * Takes a running lease for a call unless its client already holds `cap` live ones. Expired
 * leases (a worker that died mid-call) are dropped only when the count reaches the cap, where
 * they could refuse a call: below it they count for nothing, and the key's expiry bounds them.
 * The key expires with its last lease: set when the key is new, else only ever pushed later
 * (GT, Redis 7; on an older server, by the latest lease's score). Returns 1 when granted, 0
 * when refused.
 *   KEYS: the client's running set
 *   ARGV: call id, cap, lease ms, now (the worker's clock, ms: leases are seconds long, hosts' clocks agree to a few ms)
 */
const ACQUIRE = new LuaScript(`
local now = tonumber(ARGV[4])
local cap = tonumber(ARGV[2])
local n = redis.call('ZCARD', KEYS[1])
if n >= cap then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  n = redis.call('ZCARD', KEYS[1])
  if n >= cap and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
end
local until_ms = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], until_ms, ARGV[1])
if n == 0 then
  redis.call('PEXPIREAT', KEYS[1], until_ms)
elseif type(redis.pcall('PEXPIREAT', KEYS[1], until_ms, 'GT')) == 'table' then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
return 1
`);

/**
 * ACQUIRE for a call made for a user with `limits.perUser.sandboxInFlight`: the client's cap
 * and the user's, both or neither taken. Returns 1 when granted, 0 when refused.
 *   KEYS: the client's running set, the user's running set
 *   ARGV: call id, cap, lease ms, now (as ACQUIRE), the user's cap
 */
const ACQUIRE_USER = new LuaScript(`
local now = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  return 0
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], now + tonumber(ARGV[3]), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[i], last[2])
end
return 1
`);

/**
 * Worker-side cap on the calls one client runs at once across all workers (its
 * `limits.sandboxInFlight`). A worker takes a lease before running a call and gives it back
 * when the call ends; a lease expires on its own after the tool's timeout plus a grace, so a
 * worker killed mid-call frees its client's slot by then. See docs/scheduling.md.
 */
export class RunLeases {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /**
   * Takes a lease for the call unless its client runs `cap` calls already (or, with `user`,
   * that user runs `user.cap`); true if taken. The user's lease ends with the call (FINISH).
   */
  async acquire(
    clientId: string,
    kind: QueueKind,
    id: string,
    cap: number,
    leaseMs: number,
    user?: { id: string; cap: number },
  ): Promise<boolean> {
    const args = [id, Math.max(1, cap), Math.max(1, Math.ceil(leaseMs)), Date.now()];
    const granted = user
      ? await ACQUIRE_USER.run(
          this.redis,
          [this.keys.running(clientId, kind), this.keys.userRunning(clientId, user.id)],
          [...args, Math.max(1, user.cap)],
        )
      : await ACQUIRE.run(this.redis, [this.keys.running(clientId, kind)], args);
    return Number(granted) === 1;
  }

  /** Ends a lease inside a caller's pipeline (no extra round trip). */
  releaseIn(pipeline: ChainableCommander, clientId: string, kind: QueueKind, id: string): void {
    pipeline.zrem(this.keys.running(clientId, kind), id);
  }

  /** The client's live leases (expired ones are not counted). */
  async running(clientId: string, kind: QueueKind): Promise<number> {
    return this.redis.zcount(this.keys.running(clientId, kind), Date.now(), '+inf');
  }
}
