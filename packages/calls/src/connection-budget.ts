import { randomUUID } from 'node:crypto';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { LuaScript } from './script.js';

/**
 * Drops the client's expired slots (a gateway that died without giving them back), refuses
 * when `cap` live slots remain, or when the slot's user already holds `user cap` of them
 * (a slot's id ends with `~<user tag>` for a user; counted over the client's live slots, at
 * most `cap`), else takes one. Time is Redis's, so gateways with skewed clocks agree on what
 * has expired. Returns the client's live slots counting this one, minus the live slots when
 * refused for the client, or 0 when refused for the user.
 *   KEYS: the client's slot set
 *   ARGV: slot id, cap, lease ms, user suffix ('' = none), user cap (0 = none)
 */
const ACQUIRE = new LuaScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[2]) then return -held end
local suffix = ARGV[4]
local userCap = tonumber(ARGV[5])
if suffix ~= '' and userCap > 0 then
  local mine = 0
  for _, slot in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(slot, -#suffix) == suffix then mine = mine + 1 end
  end
  if mine >= userCap then return 0 end
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return held + 1
`);

/**
 * Extends this gateway's live slots of one client by a lease from now. Only slots still there
 * (XX): a renewal that reaches Redis after the slot's release must not bring it back.
 *   KEYS: the client's slot set
 *   ARGV: lease ms, slot ids…
 */
const RENEW = new LuaScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local until_ = now + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return #ARGV - 1
`);

/** A slot of a client's budget, held by one open connection. */
export interface HeldSlot {
  readonly clientId: string;
  /** Gives the slot back. Safe to call any number of times: only the first call counts. */
  release(): void;
}

export interface ConnectionBudgetOptions {
  /**
   * How long a slot outlives its gateway's last renewal (renewed every third of it): a
   * gateway killed with connections open gives their slots back after at most this long.
   */
  leaseMs: number;
}

/**
 * The per-client budget of held connections (docs/live-output.md, "Held connections"): every
 * request that keeps its connection open — a call's event stream, the approvals feed, an MCP
 * `tools/call` or `tasks/result` waiting for its call — holds one slot of its client's budget
 * for as long as it is open, counted across every gateway in one Redis sorted set per client
 * (`Keys.heldConnections`). A slot is taken by one script (the check and the increment cannot
 * be split by another gateway's request) and is a lease: its gateway renews the ones it holds,
 * so the slots of a gateway that dies come back within `leaseMs`.
 */
export class ConnectionBudget {
  /** This gateway's live slots, by client: what the renewal extends. */
  private readonly held = new Map<string, Set<string>>();
  private readonly owner = randomUUID().slice(0, 8);
  private next = 0;
  private renewal: NodeJS.Timeout | undefined;
  private renewing: Promise<void> = Promise.resolve();

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly o: ConnectionBudgetOptions,
  ) {}

  /**
   * Takes one of the client's `cap` slots: the slot, or undefined when the client already
   * holds `cap` (the caller answers 429). With `user`, the slot is also one of that user's
   * `user.cap` (`limits.perUser.streams`): 'user' when the user already holds them. Rejects
   * when Redis does not answer.
   */
  async acquire(
    clientId: string,
    cap: number,
    user?: { id: string; cap?: number },
  ): Promise<HeldSlot | undefined | 'user'> {
    // base64url holds no '~', so one user's suffix never ends another's slot id.
    const suffix = user === undefined ? '' : `~${Buffer.from(user.id).toString('base64url')}`;
    const id = `${this.owner}:${++this.next}${suffix}`;
    const n = Number(
      await ACQUIRE.run(
        this.redis,
        [this.keys.heldConnections(clientId)],
        [id, Math.max(1, cap), this.o.leaseMs, suffix, user?.cap ?? 0],
      ),
    );
    if (n === 0) return 'user';
    if (n < 0) return undefined;
    let ids = this.held.get(clientId);
    if (!ids) this.held.set(clientId, (ids = new Set()));
    ids.add(id);
    this.scheduleRenewal();
    let released = false;
    return {
      clientId,
      release: () => {
        if (released) return;
        released = true;
        this.forget(clientId, id);
        // If Redis does not hear it, the lease runs out on its own (it is no longer renewed).
        this.redis.zrem(this.keys.heldConnections(clientId), id).catch(() => undefined);
      },
    };
  }

  /** The client's live slots on every gateway (expired ones not counted). */
  async count(clientId: string): Promise<number> {
    const [seconds, micros] = await this.redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    return this.redis.zcount(this.keys.heldConnections(clientId), `(${now}`, '+inf');
  }

  /** Slots held on this gateway now (all clients). */
  get local(): number {
    let n = 0;
    for (const ids of this.held.values()) n += ids.size;
    return n;
  }

  /** Stops renewing (a closing gateway; its connections are ending). */
  async close(): Promise<void> {
    clearInterval(this.renewal);
    this.renewal = undefined;
    await this.renewing;
  }

  private forget(clientId: string, id: string): void {
    const ids = this.held.get(clientId);
    if (!ids?.delete(id) || ids.size > 0) return;
    this.held.delete(clientId);
    if (this.held.size === 0) {
      clearInterval(this.renewal);
      this.renewal = undefined;
    }
  }

  /** Renews while this gateway holds any slot: one script per client per tick. */
  private scheduleRenewal(): void {
    if (this.renewal) return;
    this.renewal = setInterval(
      () => {
        this.renewing = this.renew().catch(() => undefined);
      },
      Math.max(100, Math.floor(this.o.leaseMs / 3)),
    );
    this.renewal.unref();
  }

  private async renew(): Promise<void> {
    await Promise.all(
      [...this.held].map(([clientId, ids]) =>
        RENEW.run(this.redis, [this.keys.heldConnections(clientId)], [this.o.leaseMs, ...ids]),
      ),
    );
  }
}
