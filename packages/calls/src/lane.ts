import type { RedisClient } from './redis.js';
import type { Keys, LaneName } from './keys.js';
import { LuaScript } from './script.js';
import { MAX_PRIORITY } from './admission.js';
import type { CallJob, QueueKind } from './types.js';

/**
 * toolgate's queues: one `Lane` per queue kind (`fast` for in-process tools, `sandbox` for
 * sandboxed ones), a lean queue of toolgate's own rather than BullMQ, because a BullMQ job costs
 * Redis ~49–51 commands of its own (its add, fetch and completion scripts, event stream and
 * bookkeeping) and a calculator call through toolgate must cost ≤ 25 in all, a run_python
 * call ≤ 45 (issue 20; docs/scaling.md). A call costs three scripts: the gateway's ENQUEUE
 * (admission and the job in one), the worker's CLAIM (or the previous call's FINISH, which
 * claims the next), and FINISH. A sandbox call its client may not run yet (its running cap, the
 * reserve slot) is put back for a moment with DEFER.
 *
 * Keys (docs/redis-keys.md), all under the one prefix (one Cluster slot), `<kind>:` first:
 * - `queue`, sorted set: waiting calls, scored by fair priority × 2^32 + arrival number, so the
 *   queue serves every client's first call before anyone's second (docs/scheduling.md);
 * - `active`, sorted set: calls a worker runs (or holds), scored by its lease's end;
 * - `delayed`, sorted set: calls put back for a moment, scored by when they are due; `scores`,
 *   hash: their place in the queue, which they take again when due;
 * - `job:{id}`, string: `J<restarts>.<deferrals>|<job JSON>` while the call waits or runs; once
 *   it ended, `E|<stub JSON>` for LANE_ENDED_MS (a lookup meanwhile, before the worker's batched
 *   record lands, reads the call as running, not unknown). Scripts never re-encode the job
 *   (Lua's JSON would turn `[]` into `{}` and round numbers): they edit the counters' prefix;
 * - `seq`, the arrival counter; `wake`, a one-member sorted set idle workers block on.
 *
 * A worker that dies leaves its calls' leases to lapse: any worker's sweep hands such a call
 * out again once (restarts: 1), where the worker decides as for a stalled job (an idempotent
 * tool runs again, a non-idempotent one ends `worker_lost`); a call that lapses twice fails
 * (`worker_error`).
 */

/**
 * NOW: the scripts of a call's path (ENQUEUE, CLAIM, FINISH, DEFER) take the time from the
 * gateway or worker that runs them, as lease renewals always have, rather than a TIME command
 * each (one command per script is one per call; issue 20). Leases and put-back delays are
 * seconds long, the in-flight sets' stale horizon minutes; hosts' clocks agree to a few ms.
 * The periodic sweep reads Redis's TIME.
 */

/** How long an ended call's stub outlives it: covers the worker's batched record write. */
export const LANE_ENDED_MS = 10_000;
/** How long a failed call's stub lasts: its only trace (no record is written). */
export const LANE_FAILED_MS = 3_600_000;
/** Calls one sweep looks at: a burst of lapsed leases is handled over a few sweeps. */
const SWEEP_BATCH = 100;
/** Put-back calls one claim makes due again at most. */
const PROMOTE_BATCH = 100;
/**
 * Bytes of a job key a brief reads: the job is stored with its short fields first and its
 * arguments last, so a listing reads bounded bytes per call whatever the arguments' size.
 */
const BRIEF_BYTES = 2048;
/** Characters kept of a failure's reason in an ended call's stub. */
const REASON_CHARS = 500;
const SCORE_SPAN = 2 ** 32;
/** Users one upkeep looks at to drop those without calls in flight (a cancel leaves them). */
const USERS_UPKEEP = 100;

/** What the job key holds once the call ended (or failed outside its tool). */
export interface LaneStub {
  ended: true;
  tool: string;
  clientId: string;
  user?: string;
  acceptedAt: number;
  /** Set when the call failed outside its tool (no record is written then). */
  failed?: string;
}

/**
 * Moves the put-back calls that are due into the queue, at the place they had (a Lua snippet
 * shared by CLAIM and FINISH; `now` is set, KEYS[1] is the queue, `d` and `s` the delayed set
 * and the scores hash).
 */
const PROMOTE = `
local due = redis.call('ZRANGEBYSCORE', d, '-inf', now, 'LIMIT', 0, ${PROMOTE_BATCH})
for _, id in ipairs(due) do
  redis.call('ZREM', d, id)
  local score = tonumber(redis.call('HGET', s, id)) or 0
  redis.call('HDEL', s, id)
  redis.call('ZADD', KEYS[1], score, id)
end
`;

/**
 * ENQUEUE's and ENQUEUE_USER's admission against the client's limit (both queues' in-flight
 * sets; stale entries pruned only on the way to a refusal): sets `here`, `there`, or refuses.
 */
const ADMIT = `local here = redis.call('ZCARD', KEYS[1])
local there = redis.call('ZCARD', KEYS[2])
if limit > 0 and here + there >= limit then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - horizon)
  here = redis.call('ZCARD', KEYS[1])
  there = redis.call('ZCARD', KEYS[2])
  if here + there >= limit then return {0, here + there, 0} end
end`;

/** Their common end: the job stored and queued at `priority` (1 on a session queue), a wake. */
const QUEUE = `if ARGV[7] == '1' then priority = 1 end
local seq = redis.call('INCR', KEYS[4]) % ${SCORE_SPAN}
redis.call('SET', KEYS[5], ARGV[4], 'PX', horizon)
redis.call('ZADD', KEYS[3], priority * ${SCORE_SPAN} + seq, ARGV[1])
redis.call('ZADD', KEYS[6], 0, '0')
return {1, priority}`;

/**
 * Admission and enqueue in one. Refuses when the client's calls in flight (both queues)
 * reach the limit; else records the call in flight, stores its job and queues it at its fair
 * place. Upkeep (prune stale in-flight entries, renew the set's expiry) only when ARGV[5] is
 * 1 — the gateway asks for it once a second per client — or on the way to a refusal.
 *   KEYS: in-flight set (this queue), in-flight set (the other), queue, seq, job key, wake
 *   ARGV: call id, limit (0 = never refuse), stale horizon ms, job text, upkeep, now (the
 *         gateway's clock, ms: see NOW), arrival order only (1: a worker's session queue,
 *         whose calls run in the order sent)
 *   → {1, priority} or {0, calls in flight, 0}
 */
const ENQUEUE = new LuaScript(`
local now = tonumber(ARGV[6])
local horizon = tonumber(ARGV[3])
local limit = tonumber(ARGV[2])
local upkeep = ARGV[5] == '1'
if upkeep then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
  if oldest and tonumber(oldest) < now - horizon then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
  end
end
${ADMIT}
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
if upkeep or (here == 0 and added == 1) then redis.call('PEXPIRE', KEYS[1], horizon) end
local priority = math.min(math.max(1, here + added), ${MAX_PRIORITY})
${QUEUE}
`);

/**
 * ENQUEUE for a call made for a user (an OAuth token's user claim): the client's admission as
 * above, then the user's (`limits.perUser.queued`, both queues, 0 = none), and a priority that
 * shares the client's turns between its users: the user's position in its own backlog times
 * the number of the client's users with calls in this queue. A client whose calls all come
 * from one user gets the priorities ENQUEUE gives; with u users, each user's n-th call gets
 * n·u, so the client still has about one call per priority level (fair to other clients) and
 * its users take turns (fair between them). Upkeep also drops users without calls in flight
 * from the users set (a cancel leaves them there).
 *   KEYS: as ENQUEUE, then the user's in-flight set (this queue), (the other), the client's
 *         users in flight (this queue)
 *   ARGV: as ENQUEUE (seven), then the user's limit (0 = none), the user, the users'
 *         in-flight key prefix for this queue (`…:inflight-user:<client>:<kind>:`)
 *   → {1, priority} or {0, calls in flight, 0 (the client's limit) or 1 (the user's)}
 */
const ENQUEUE_USER = new LuaScript(`
local now = tonumber(ARGV[6])
local horizon = tonumber(ARGV[3])
local limit = tonumber(ARGV[2])
local ulimit = tonumber(ARGV[8])
local upkeep = ARGV[5] == '1'
if upkeep then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - horizon)
  redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', now - horizon)
  for _, u in ipairs(redis.call('ZRANGE', KEYS[9], 0, ${USERS_UPKEEP - 1})) do
    if redis.call('ZCARD', ARGV[10] .. u) == 0 then redis.call('ZREM', KEYS[9], u) end
  end
end
${ADMIT}
local uhere = redis.call('ZCARD', KEYS[7])
if ulimit > 0 then
  local uthere = redis.call('ZCARD', KEYS[8])
  if uhere + uthere >= ulimit then
    redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - horizon)
    redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now - horizon)
    uhere = redis.call('ZCARD', KEYS[7])
    uthere = redis.call('ZCARD', KEYS[8])
    if uhere + uthere >= ulimit then return {0, uhere + uthere, 1} end
  end
end
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
if upkeep or (here == 0 and added == 1) then redis.call('PEXPIRE', KEYS[1], horizon) end
redis.call('ZADD', KEYS[7], now, ARGV[1])
redis.call('PEXPIRE', KEYS[7], horizon)
redis.call('ZADD', KEYS[9], now, ARGV[9])
redis.call('PEXPIRE', KEYS[9], horizon)
local users = redis.call('ZCARD', KEYS[9])
local priority = math.min(math.max(1, (uhere + 1) * users), ${MAX_PRIORITY})
${QUEUE}
`);

/**
 * Takes up to n waiting calls (put-back ones that are due first rejoin the queue): each
 * leaves the queue for the active set with a lease. Another idle worker is woken when calls
 * may remain. With fewer than n taken the queue is drained: the worker waits for the wake key
 * rather than asking again, until the next put-back call is due ('' if none), which comes
 * first in the reply. A sandbox call's cancel marker comes with its job (ARGV[5], the markers'
 * prefix, is set), so the worker reads no key of its own before running it.
 *   KEYS: queue, active, wake, delayed, scores
 *   ARGV: n, lease ms, job key prefix, put-back calls (1: this queue has them), cancel marker
 *         prefix ('' = none), now (the worker's clock, ms: see NOW)
 *   → {next due, drained (1/0), id1, score1, job1, marker1, id2, …} (a job is false when it
 *     expired, a marker false when the call was not cancelled)
 */
const CLAIM = new LuaScript(`
local now = tonumber(ARGV[6])
local d, s = KEYS[4], KEYS[5]
-- The first put-back call, if any: most claims find none and read nothing more of them.
local first = ARGV[4] == '1' and redis.call('ZRANGE', d, 0, 0, 'WITHSCORES')[2]
if first and tonumber(first) <= now then
  ${PROMOTE}
  first = redis.call('ZRANGE', d, 0, 0, 'WITHSCORES')[2]
end
local n = tonumber(ARGV[1])
local popped = redis.call('ZPOPMIN', KEYS[1], n)
local drained = #popped < 2 * n
local next = drained and first or ''
local out = {next, drained and 1 or 0}
if #popped == 0 then return out end
local leases, keys = {}, {}
local marked = ARGV[5] ~= ''
for i = 1, #popped, 2 do
  leases[#leases + 1] = now + tonumber(ARGV[2])
  leases[#leases + 1] = popped[i]
  keys[#keys + 1] = ARGV[3] .. popped[i]
  if marked then keys[#keys + 1] = ARGV[5] .. popped[i] end
end
redis.call('ZADD', KEYS[2], unpack(leases))
local values = redis.call('MGET', unpack(keys))
local per = marked and 2 or 1
for i = 1, #popped / 2 do
  out[#out + 1] = popped[2 * i - 1]
  out[#out + 1] = popped[2 * i]
  out[#out + 1] = values[per * (i - 1) + 1]
  out[#out + 1] = marked and values[per * i] or false
end
if not drained and redis.call('ZCARD', KEYS[1]) > 0 then redis.call('ZADD', KEYS[3], 0, '0') end
return out
`);

/**
 * Ends a call in one step: into its client's index before out of its in-flight set (a
 * listing sees it in one or the other), out of the active set (and, for a sandbox call, its
 * client's running set: RunLeases; for a user's call, the user's in-flight and running sets,
 * and the user out of the client's users in flight when it has no call left there), its job replaced by a stub, the waiting gateway and the
 * call's watchers told. Then, unless ARGV[8] is 0, takes the
 * next waiting call for the same slot (as CLAIM, without waking others; put-back calls that
 * are due rejoin the queue first when ARGV[11] is 1; its cancel marker comes with it when
 * ARGV[12] is set).
 *   KEYS: queue, active, job key, in-flight set, call index, delayed, scores, running set,
 *         the user's in-flight set, the client's users in flight, the user's running set
 *         (unused without a user)
 *   ARGV: id, stub text, stub ms, reply channel ('' = none), events channel ('' = none: the
 *         worker's record batch publishes the outcome with the record), outcome JSON,
 *         outcome event JSON, claim n, lease ms, job key prefix, sandbox (1: promote due
 *         put-back calls, end the running lease), cancel marker prefix ('' = none), now,
 *         user ('' = none)
 *   → {} or {next id, next score, next job, next marker}
 */
const FINISH = new LuaScript(`
local now = tonumber(ARGV[13])
redis.call('ZADD', KEYS[5], now, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[11] == '1' then redis.call('ZREM', KEYS[8], ARGV[1]) end
if ARGV[14] ~= '' then
  redis.call('ZREM', KEYS[9], ARGV[1])
  if redis.call('ZCARD', KEYS[9]) == 0 then redis.call('ZREM', KEYS[10], ARGV[14]) end
  if ARGV[11] == '1' then redis.call('ZREM', KEYS[11], ARGV[1]) end
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', tonumber(ARGV[3]))
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[6]) end
if ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[7]) end
if ARGV[8] == '0' then return {} end
if ARGV[11] == '1' then
  local d, s = KEYS[6], KEYS[7]
  ${PROMOTE}
end
local popped = redis.call('ZPOPMIN', KEYS[1], 1)
if #popped == 0 then return {} end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[9]), popped[1])
if ARGV[12] == '' then return {popped[1], popped[2], redis.call('GET', ARGV[10] .. popped[1]), false} end
local values = redis.call('MGET', ARGV[10] .. popped[1], ARGV[12] .. popped[1])
return {popped[1], popped[2], values[1], values[2]}
`);

/**
 * Puts a call a worker took back for a moment (its client runs its share already): out of the
 * active set, due again in ARGV[2] ms at the place it had, its deferrals counted in its job.
 *   KEYS: active, delayed, scores, job key
 *   ARGV: id, delay ms, queue score, now
 *   → the call's deferrals now, or -1 when its job is gone
 */
const DEFER = new LuaScript(`
local now = tonumber(ARGV[4])
redis.call('ZREM', KEYS[1], ARGV[1])
local text = redis.call('GET', KEYS[4])
local bar = text and string.find(text, '|', 1, true)
if not bar or string.sub(text, 1, 1) ~= 'J' then return -1 end
local head = string.sub(text, 2, bar - 1)
local dot = string.find(head, '.', 1, true)
local restarts = dot and string.sub(head, 1, dot - 1) or head
local deferrals = (dot and tonumber(string.sub(head, dot + 1)) or 0) + 1
redis.call('SET', KEYS[4], 'J' .. restarts .. '.' .. deferrals .. string.sub(text, bar), 'KEEPTTL')
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return deferrals
`);

/**
 * Hands out again the calls whose lease lapsed (their worker died): at the head of the queue,
 * restarts + 1; a call that lapsed twice fails instead (stub with the reason, its in-flight
 * entry ended, its waiting gateway told). Returns the ids handed out again and the ids failed.
 *   KEYS: queue, active, seq, wake
 *   ARGV: job key prefix, in-flight key prefix, batch, failed stub ms, stale horizon ms, kind,
 *         users' in-flight key prefix
 */
const SWEEP = new LuaScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local again, failed = {}, {}
for _, id in ipairs(lapsed) do
  redis.call('ZREM', KEYS[2], id)
  local key = ARGV[1] .. id
  local text = redis.call('GET', key)
  local bar = text and string.find(text, '|', 1, true)
  if bar and string.sub(text, 1, 1) == 'J' then
    local head = string.sub(text, 2, bar - 1)
    local dot = string.find(head, '.', 1, true)
    local restarts = (tonumber(dot and string.sub(head, 1, dot - 1) or head) or 0) + 1
    local deferrals = dot and string.sub(head, dot + 1) or '0'
    local rest = string.sub(text, bar + 1)
    if restarts > 1 then
      local ok, job = pcall(cjson.decode, rest)
      if ok and type(job) == 'table' then
        redis.call('SET', key, 'E|' .. cjson.encode({ended = true, tool = job.tool,
          clientId = job.clientId, user = job.user, acceptedAt = job.acceptedAt,
          failed = 'its workers stopped twice while running it'}), 'PX', tonumber(ARGV[4]))
        redis.call('ZREM', ARGV[2] .. tostring(job.clientId) .. ':' .. ARGV[6], id)
        if type(job.user) == 'string' then
          redis.call('ZREM', ARGV[7] .. tostring(job.clientId) .. ':' .. ARGV[6] .. ':' .. job.user, id)
        end
        -- A gateway that waits for it hears at once, as from a FINISH (failedOutcome's shape).
        if type(job.replyTo) == 'string' then
          redis.call('PUBLISH', job.replyTo, cjson.encode({id = id, tool = job.tool,
            status = 'error', error = {code = 'worker_error',
              message = 'the call could not be completed: its workers stopped twice while running it'},
            durationMs = 0, cached = false}))
        end
      else
        redis.call('DEL', key)
      end
      failed[#failed + 1] = id
    else
      redis.call('SET', key, 'J' .. restarts .. '.' .. deferrals .. '|' .. rest, 'PX', tonumber(ARGV[5]))
      redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[3]) % ${SCORE_SPAN}, id)
      again[#again + 1] = id
    end
  end
end
if #again > 0 then redis.call('ZADD', KEYS[4], 0, '0') end
return {again, failed}
`);

/**
 * Takes a waiting (or put-back) call out of the queue (a cancel); its job text, or false if it
 * was not waiting.
 *   KEYS: queue, job key, delayed, scores
 */
const REMOVE = new LuaScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then return false end
  redis.call('HDEL', KEYS[4], ARGV[1])
end
local text = redis.call('GET', KEYS[2])
redis.call('DEL', KEYS[2])
return text
`);

/**
 * Takes every call out of a lost worker's session queue (waiting and held) at once, so that
 * exactly one caller ends each: their ids and jobs, the queue's keys deleted.
 *   KEYS: queue, active, delayed, scores, seq, wake
 *   ARGV: job key prefix
 *   → {id1, job1, id2, job2, …} (a job is false when it expired)
 */
const DRAIN = new LuaScript(`
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do ids[#ids + 1] = id end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('GET', ARGV[1] .. id)
end
return out
`);

export type LaneAdmit =
  | { admitted: true; priority: number }
  | { admitted: false; inFlight: number; scope: 'client' | 'user' };

/** A call a worker took: its job, its place in the queue, and its history. */
export interface LaneCall {
  job: CallJob;
  /** Its queue score (a put-back call takes it again). */
  score: number;
  /** How often a dead worker's lease handed the call out again. */
  restarts: number;
  /** How often it was put back for fairness. */
  deferrals: number;
  /**
   * Sandbox calls: who cancelled it before it was taken (its cancel marker, read with its
   * job), or null. Undefined for fast calls (the worker goes by the cancels it heard).
   */
  cancelledBy?: string | null;
}

export type LaneState =
  { state: 'waiting' | 'active'; job: CallJob } | { state: 'ended'; stub: LaneStub } | undefined;

export interface LaneClaim {
  calls: LaneCall[];
  /**
   * Fewer calls than asked were waiting: the queue is empty, so the worker waits for its wake
   * key (or the next put-back call) instead of asking again.
   */
  drained: boolean;
  /** With the queue drained: when the next put-back call is due (epoch ms), if any. */
  nextDueAt?: number;
}

export class Lane {
  private readonly jobPrefix: string;
  /** The cancel markers' prefix for the sandbox queue ('' for the fast one: see LaneCall). */
  private readonly markerPrefix: string;
  private readonly other: QueueKind;
  /** Whether this is a worker's session queue (not one of the shared queues). */
  private readonly own: boolean;

  /**
   * @param name the queue's own keys; default the kind's shared queue. A worker's session queue
   *   (`Keys.sessionLane`) shares its kind's job keys, calls in flight and lookups, and serves
   *   its calls in the order they arrive (docs/sessions.md).
   */
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    readonly kind: QueueKind,
    readonly name: LaneName = kind,
  ) {
    this.own = name !== kind;
    this.jobPrefix = keys.laneJob(kind, '');
    this.markerPrefix = kind === 'sandbox' ? keys.cancelled('') : '';
    this.other = kind === 'fast' ? 'sandbox' : 'fast';
  }

  /**
   * Admits the call against `limit` calls in flight (0: never refuse, for approved calls)
   * and queues it: one round trip. `upkeep` asks for the in-flight set's pruning and expiry
   * (once a second per client is enough; see Upkeep).
   */
  async enqueue(
    job: CallJob,
    limit: number,
    staleAfterMs: number,
    upkeep: boolean,
    /** A user's calls in flight (both queues); 0 or absent: none beyond the client's. */
    userLimit = 0,
  ): Promise<LaneAdmit> {
    const k = this.keys;
    const keys = [
      k.inFlight(job.clientId, this.kind),
      k.inFlight(job.clientId, this.other),
      k.laneQueue(this.name),
      k.laneSeq(this.name),
      k.laneJob(this.kind, job.id),
      k.laneWake(this.name),
    ];
    const args = [
      job.id,
      limit,
      staleAfterMs,
      `J0.0|${serialize(job)}`,
      upkeep ? 1 : 0,
      Date.now(),
      this.own ? 1 : 0,
    ];
    const user = job.user;
    const [ok, n, scope] = (
      user === undefined
        ? await ENQUEUE.run(this.redis, keys, args)
        : await ENQUEUE_USER.run(
            this.redis,
            [
              ...keys,
              k.userInFlight(job.clientId, this.kind, user),
              k.userInFlight(job.clientId, this.other, user),
              k.usersInFlight(job.clientId, this.kind),
            ],
            [...args, userLimit, user, k.userInFlight(job.clientId, this.kind, '')],
          )
    ) as [number, number, number?];
    return ok === 1
      ? { admitted: true, priority: n }
      : { admitted: false, inFlight: n, scope: scope === 1 ? 'user' : 'client' };
  }

  /** Takes up to `n` waiting calls, each with a lease of `leaseMs`. */
  async claim(n: number, leaseMs: number): Promise<LaneClaim> {
    const k = this.keys;
    const [next, drained, ...flat] = (await CLAIM.run(
      this.redis,
      [
        k.laneQueue(this.name),
        k.laneActive(this.name),
        k.laneWake(this.name),
        k.laneDelayed(this.name),
        k.laneScores(this.name),
      ],
      [
        n,
        leaseMs,
        this.jobPrefix,
        this.kind === 'sandbox' && !this.own ? 1 : 0,
        this.markerPrefix,
        Date.now(),
      ],
    )) as (string | number | null)[];
    const claim: LaneClaim = {
      calls: this.calls(flat as (string | null)[]),
      drained: drained === 1,
    };
    if (next) claim.nextDueAt = Number(next);
    return claim;
  }

  /**
   * Ends a call (see FINISH) and, with `claimNext`, takes the next waiting call for the slot.
   * The call's `replyTo` is told the outcome, if a gateway waits for it.
   */
  async finish(
    call: CallJob,
    outcome: { json: string; event: string },
    options: {
      claimNext: boolean;
      leaseMs: number;
      failed?: string;
      /** Publish the outcome to the call's watchers here (else the record batch does). */
      publish?: boolean;
    },
  ): Promise<LaneCall[]> {
    const k = this.keys;
    const stub: LaneStub = {
      ended: true,
      tool: call.tool,
      clientId: call.clientId,
      ...(call.user === undefined ? {} : { user: call.user }),
      acceptedAt: call.acceptedAt,
      ...(options.failed ? { failed: options.failed.slice(0, REASON_CHARS) } : {}),
    };
    const flat = (await FINISH.run(
      this.redis,
      [
        k.laneQueue(this.name),
        k.laneActive(this.name),
        k.laneJob(this.kind, call.id),
        k.inFlight(call.clientId, this.kind),
        k.callIndex(call.clientId),
        k.laneDelayed(this.name),
        k.laneScores(this.name),
        k.running(call.clientId, this.kind),
        // Unused without a user (no command runs on them), but named all the same.
        k.userInFlight(call.clientId, this.kind, call.user ?? ''),
        k.usersInFlight(call.clientId, this.kind),
        k.userRunning(call.clientId, call.user ?? ''),
      ],
      [
        call.id,
        `E|${JSON.stringify(stub)}`,
        options.failed ? LANE_FAILED_MS : LANE_ENDED_MS,
        call.replyTo ?? '',
        options.publish === false ? '' : k.eventsChannel(call.id),
        outcome.json,
        outcome.event,
        options.claimNext ? 1 : 0,
        options.leaseMs,
        this.jobPrefix,
        // Only the sandbox queue puts calls back and holds running leases.
        this.kind === 'sandbox' ? 1 : 0,
        this.markerPrefix,
        Date.now(),
        call.user ?? '',
      ],
    )) as (string | null)[];
    return this.calls(flat);
  }

  /**
   * Puts a call this worker took back for `delayMs`, at its place in the queue; returns its
   * deferrals so far (this one counted).
   */
  async defer(call: LaneCall, delayMs: number): Promise<number> {
    const k = this.keys;
    return Number(
      await DEFER.run(
        this.redis,
        [
          k.laneActive(this.name),
          k.laneDelayed(this.name),
          k.laneScores(this.name),
          k.laneJob(this.kind, call.job.id),
        ],
        [call.job.id, Math.max(1, Math.round(delayMs)), call.score, Date.now()],
      ),
    );
  }

  /** Extends the leases of calls this worker runs (one command for all of them). */
  async renew(ids: readonly string[], leaseMs: number): Promise<void> {
    if (ids.length === 0) return;
    const until = Date.now() + leaseMs;
    await this.redis.zadd(
      this.keys.laneActive(this.name),
      'XX',
      ...ids.flatMap((id) => [until, id]),
    );
  }

  /** Hands lapsed calls out again, or fails those that lapsed twice (see SWEEP). */
  async sweep(staleAfterMs: number): Promise<{ again: string[]; failed: string[] }> {
    const k = this.keys;
    const [again, failed] = (await SWEEP.run(
      this.redis,
      [
        k.laneQueue(this.name),
        k.laneActive(this.name),
        k.laneSeq(this.name),
        k.laneWake(this.name),
      ],
      [
        this.jobPrefix,
        k.inFlightPrefix,
        SWEEP_BATCH,
        LANE_FAILED_MS,
        staleAfterMs,
        this.kind,
        k.userInFlightPrefix,
      ],
    )) as [string[], string[]];
    return { again, failed };
  }

  /** Takes every call out of the queue, waiting or held (see DRAIN): a lost worker's queue. */
  async drain(): Promise<CallJob[]> {
    const k = this.keys;
    const flat = (await DRAIN.run(
      this.redis,
      [
        k.laneQueue(this.name),
        k.laneActive(this.name),
        k.laneDelayed(this.name),
        k.laneScores(this.name),
        k.laneSeq(this.name),
        k.laneWake(this.name),
      ],
      [this.jobPrefix],
    )) as (string | null)[];
    const jobs: CallJob[] = [];
    for (let i = 0; i < flat.length; i += 2) {
      const value = flat[i + 1] ? parse(flat[i + 1]!) : undefined;
      if (value && 'job' in value) jobs.push(value.job);
    }
    return jobs;
  }

  /** Takes a call that has not started out of the queue; its job, or undefined. */
  async remove(id: string): Promise<CallJob | undefined> {
    const k = this.keys;
    const text = (await REMOVE.run(
      this.redis,
      [
        k.laneQueue(this.name),
        k.laneJob(this.kind, id),
        k.laneDelayed(this.name),
        k.laneScores(this.name),
      ],
      [id],
    )) as string | null;
    const parsed = text ? parse(text) : undefined;
    return parsed && 'job' in parsed ? parsed.job : undefined;
  }

  /** Where a call is: waiting (or put back), held by a worker, ended, or unknown here. */
  async state(id: string): Promise<LaneState> {
    const k = this.keys;
    const [[, text], [, active]] = (await this.redis
      .multi()
      .get(k.laneJob(this.kind, id))
      .zscore(k.laneActive(this.name), id)
      .exec()) as [[unknown, string | null], [unknown, string | null]];
    const value = text ? parse(text) : undefined;
    if (!value) return undefined;
    if ('stub' in value) return { state: 'ended', stub: value.stub };
    return { state: active === null ? 'waiting' : 'active', job: value.job };
  }

  /**
   * What a listing shows of a call in the lane, from the first BRIEF_BYTES of its job key
   * (never its arguments): tool, accept time and state. Undefined when the lane has no such call.
   */
  async brief(id: string): Promise<
    | {
        tool: string;
        user?: string;
        acceptedAt: number;
        state: 'waiting' | 'active' | 'ended' | 'failed';
        /** Why it failed (`failed` only). */
        failed?: string;
      }
    | undefined
  > {
    const k = this.keys;
    const [[, head], [, active]] = (await this.redis
      .multi()
      .getrange(k.laneJob(this.kind, id), 0, BRIEF_BYTES - 1)
      .zscore(k.laneActive(this.name), id)
      .exec()) as [[unknown, string], [unknown, string | null]];
    if (!head) return undefined;
    if (head.startsWith('E|')) {
      const stub = parse(head);
      if (!stub || !('stub' in stub)) return undefined;
      const { tool, user, acceptedAt, failed } = stub.stub;
      return {
        tool,
        ...(user === undefined ? {} : { user }),
        acceptedAt,
        ...(failed === undefined
          ? { state: 'ended' as const }
          : { state: 'failed' as const, failed }),
      };
    }
    const tool = /"tool":("(?:[^"\\]|\\.)*")/.exec(head)?.[1];
    const acceptedAt = /"acceptedAt":(\d+)/.exec(head)?.[1];
    if (tool === undefined || acceptedAt === undefined) return undefined;
    // Right after acceptedAt (see serialize), never a "user" inside the arguments.
    const user = /"acceptedAt":\d+,"user":("(?:[^"\\]|\\.)*")/.exec(head)?.[1];
    return {
      tool: JSON.parse(tool) as string,
      ...(user === undefined ? {} : { user: JSON.parse(user) as string }),
      acceptedAt: Number(acceptedAt),
      state: active === null ? 'waiting' : 'active',
    };
  }

  /** Calls waiting, put back for a moment, and held by workers (the queue-depth gauges). */
  async counts(): Promise<{ waiting: number; delayed: number; active: number }> {
    const k = this.keys;
    const [[, waiting], [, delayed], [, active]] = (await this.redis
      .multi()
      .zcard(k.laneQueue(this.name))
      .zcard(k.laneDelayed(this.name))
      .zcard(k.laneActive(this.name))
      .exec()) as [[unknown, number], [unknown, number], [unknown, number]];
    return { waiting, delayed, active };
  }

  /**
   * Blocks on `blocking` (a connection of its own) until a call may be waiting or `timeoutS`
   * passed.
   */
  async waitForWork(blocking: RedisClient, timeoutS: number): Promise<void> {
    await blocking.bzpopmin(this.keys.laneWake(this.name), timeoutS);
  }

  private calls(flat: (string | null)[]): LaneCall[] {
    const out: LaneCall[] = [];
    for (let i = 0; i < flat.length; i += 4) {
      const text = flat[i + 2];
      // Its job expired while it waited (past the stale horizon): nothing to run.
      const value = text ? parse(text) : undefined;
      if (!value || !('job' in value)) continue;
      const call: LaneCall = { ...value, score: Number(flat[i + 1]) };
      if (this.markerPrefix !== '') call.cancelledBy = flat[i + 3] ?? null;
      out.push(call);
    }
    return out;
  }
}

/** An ended call's stub from its job key's text (`E|…`); undefined if it is not one, or cut. */
export function endedStub(text: string): LaneStub | undefined {
  if (!text.startsWith('E|')) return undefined;
  try {
    return JSON.parse(text.slice(2)) as LaneStub;
  } catch {
    return undefined;
  }
}

/** A job as stored: its short fields first, its arguments last (see BRIEF_BYTES). */
function serialize(job: CallJob): string {
  const { id, tool, clientId, acceptedAt, user, args, ...rest } = job;
  return JSON.stringify({ id, tool, clientId, acceptedAt, user, ...rest, args });
}

/** A job key's value: a call waiting or running (with its counters), or an ended call's stub. */
function parse(text: string): Omit<LaneCall, 'score'> | { stub: LaneStub } | undefined {
  const bar = text.indexOf('|');
  if (bar < 1) return undefined;
  const body = JSON.parse(text.slice(bar + 1)) as unknown;
  if (text[0] === 'E') return { stub: body as LaneStub };
  if (text[0] !== 'J') return undefined;
  const [restarts, deferrals] = text.slice(1, bar).split('.');
  return {
    job: body as CallJob,
    restarts: Number(restarts) || 0,
    deferrals: Number(deferrals) || 0,
  };
}
