import { Job, Queue, type JobsOptions, type QueueOptions } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';
import type { RedisClient } from './redis.js';
import type { Keys, QueueName } from './keys.js';
import { LuaScript } from './script.js';
import { MAX_PRIORITY } from './admission.js';
import type { CallJob, QueueKind } from './types.js';
import type { BudgetCharges } from './budgets.js';

/**
 * One of toolgate's queues as a BullMQ queue (docs/scheduling.md): `fast` for in-process tools,
 * `sandbox` for sandboxed ones, and one `sessions-<worker>` per worker hosting sessions. A call
 * is a BullMQ job whose id is the call id, whose name is the tool, and whose data is the call.
 *
 * Around BullMQ's own scripts toolgate runs two of its own, on its own keys only:
 * - ADMIT, at the gateway before `Queue.add`: the client's (and user's) calls in flight against
 *   `limits.queued`, and the call's fair priority. A failed add is undone (RETRACT), so a refusal
 *   or a failed add leaves nothing behind.
 * - RELEASE, at the worker when the call ends: into the client's call index, out of its
 *   in-flight and running sets, an ended stub, and the outcome published to the waiting gateway
 *   and to the call's watchers. The worker then completes (or fails) the BullMQ job.
 *
 * Fair order is BullMQ's: a prioritized job is scored priority × 2³² + an arrival counter, so
 * every add sets a priority (an unprioritised job would jump ahead of all of them). A session
 * queue serves its calls in the order sent: priority 1 for all.
 */

/** How long an ended call's stub outlives it: covers the worker's batched record write. */
export const ENDED_STUB_MS = 10_000;
/** How long a failed call's stub lasts: its only trace (no record is written). */
export const FAILED_STUB_MS = 3_600_000;
/** Bytes of a job's data (the call) a brief reads: its short fields, never its arguments. */
const BRIEF_BYTES = 2048;
/** Characters kept of a failure's reason in an ended call's stub. */
const REASON_CHARS = 500;
/** Users one upkeep looks at to drop those without calls in flight (a cancel leaves them). */
const USERS_UPKEEP = 100;
/** How long a removed call's mark lasts (see `remove`): beyond any race between two removers. */
const REMOVED_MARK_MS = 60_000;
/** Entries BullMQ keeps in a queue's event stream: nothing of toolgate reads it. */
const EVENTS_MAX_LEN = 10;

/** What the ended stub holds once the call ended (or failed outside its tool). */
export interface EndedStub {
  ended: true;
  tool: string;
  /** The queue kind it ran in. */
  queue: QueueKind;
  clientId: string;
  user?: string;
  acceptedAt: number;
  /** Set when the call failed outside its tool (no record is written then). */
  failed?: string;
}

/**
 * ADMIT's refusal against the client's limit (both queues' in-flight sets; stale entries pruned
 * only on the way to a refusal): sets `here`, `there`, or refuses.
 */
const CLIENT_LIMIT = `local here = redis.call('ZCARD', KEYS[1])
local there = redis.call('ZCARD', KEYS[2])
if limit > 0 and here + there >= limit then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - horizon)
  here = redis.call('ZCARD', KEYS[1])
  there = redis.call('ZCARD', KEYS[2])
  if here + there >= limit then return {0, here + there, 0} end
end`;

/**
 * Admission: refuses when the client's calls in flight (both queues) reach the limit; else
 * records the call in flight and returns its fair priority: the client's count in this queue
 * once the call is added (1 for its only call). Upkeep (prune stale in-flight entries, renew the
 * set's expiry) only when ARGV[4] is 1 — once a second per client — or on the way to a refusal.
 *   KEYS: in-flight set (this queue), in-flight set (the other)
 *   ARGV: call id, limit (0 = never refuse), stale horizon ms, upkeep, now (the gateway's clock)
 *   → {1, priority} or {0, calls in flight, 0}
 */
const ADMIT = new LuaScript(`
local now = tonumber(ARGV[5])
local horizon = tonumber(ARGV[3])
local limit = tonumber(ARGV[2])
local upkeep = ARGV[4] == '1'
if upkeep then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
  if oldest and tonumber(oldest) < now - horizon then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
  end
end
${CLIENT_LIMIT}
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
if upkeep or (here == 0 and added == 1) then redis.call('PEXPIRE', KEYS[1], horizon) end
return {1, math.min(math.max(1, here + added), ${MAX_PRIORITY})}
`);

/**
 * ADMIT for a call made for a user (an OAuth token's user claim): the client's admission as
 * above, then the user's (`limits.perUser.queued`, both queues, 0 = none), and a priority that
 * shares the client's turns between its users: the user's position in its own backlog times the
 * number of the client's users with calls in this queue. With u users, each user's n-th call
 * gets n·u, so the client still has about one call per priority level (fair to other clients)
 * and its users take turns (fair between them). Upkeep also drops users without calls in flight.
 *   KEYS: as ADMIT, then the user's in-flight set (this queue), (the other), the client's users
 *         in flight (this queue)
 *   ARGV: as ADMIT (five), then the user's limit (0 = none), the user, the users' in-flight key
 *         prefix for this queue (`…:inflight-user:<client>:<kind>:`)
 *   → {1, priority} or {0, calls in flight, 0 (the client's limit) or 1 (the user's)}
 */
const ADMIT_USER = new LuaScript(`
local now = tonumber(ARGV[5])
local horizon = tonumber(ARGV[3])
local limit = tonumber(ARGV[2])
local ulimit = tonumber(ARGV[6])
local upkeep = ARGV[4] == '1'
if upkeep then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - horizon)
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - horizon)
  for _, u in ipairs(redis.call('ZRANGE', KEYS[5], 0, ${USERS_UPKEEP - 1})) do
    if redis.call('ZCARD', ARGV[8] .. u) == 0 then redis.call('ZREM', KEYS[5], u) end
  end
end
${CLIENT_LIMIT}
local uhere = redis.call('ZCARD', KEYS[3])
if ulimit > 0 then
  local uthere = redis.call('ZCARD', KEYS[4])
  if uhere + uthere >= ulimit then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - horizon)
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - horizon)
    uhere = redis.call('ZCARD', KEYS[3])
    uthere = redis.call('ZCARD', KEYS[4])
    if uhere + uthere >= ulimit then return {0, uhere + uthere, 1} end
  end
end
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
if upkeep or (here == 0 and added == 1) then redis.call('PEXPIRE', KEYS[1], horizon) end
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('PEXPIRE', KEYS[3], horizon)
redis.call('ZADD', KEYS[5], now, ARGV[7])
redis.call('PEXPIRE', KEYS[5], horizon)
local users = redis.call('ZCARD', KEYS[5])
return {1, math.min(math.max(1, (uhere + 1) * users), ${MAX_PRIORITY})}
`);

/**
 * Ends a call on toolgate's side in one step: into its client's index before out of its
 * in-flight set (a listing sees it in one or the other), out of its client's running set (a
 * sandbox call: RunLeases) and, for a user's call, the user's in-flight and running sets (and
 * the user out of the client's users in flight when it has none left there); an ended stub
 * for lookups until the record lands; the waiting gateway and the call's watchers told.
 *   KEYS: call index, in-flight set, running set, ended stub, the user's in-flight set, the
 *         client's users in flight, the user's running set (the last three unused without a user)
 *   ARGV: id, stub text, stub ms, reply channel ('' = none), events channel ('' = none: the
 *         worker's record batch publishes the outcome with the record), outcome JSON, outcome
 *         event JSON, now, sandbox (1: end the running lease), user ('' = none)
 * Then the call's budget charges (BudgetCharges, docs/budgets.md), charged before anyone hears
 * of the end, so the caller's next call is admitted against them:
 *   KEYS[8…]: a budget window's hash each; ARGV[11…] per key: expire-at ms, field count, then
 *         field and amount pairs (HINCRBY each, then PEXPIREAT)
 */
const RELEASE = new LuaScript(`
redis.call('ZADD', KEYS[1], tonumber(ARGV[8]), ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[9] == '1' then redis.call('ZREM', KEYS[3], ARGV[1]) end
if ARGV[10] ~= '' then
  redis.call('ZREM', KEYS[5], ARGV[1])
  if redis.call('ZCARD', KEYS[5]) == 0 then redis.call('ZREM', KEYS[6], ARGV[10]) end
  if ARGV[9] == '1' then redis.call('ZREM', KEYS[7], ARGV[1]) end
end
redis.call('SET', KEYS[4], ARGV[2], 'PX', tonumber(ARGV[3]))
local a = 11
for k = 8, #KEYS do
  local n = tonumber(ARGV[a + 1])
  for f = 0, n - 1 do
    redis.call('HINCRBY', KEYS[k], ARGV[a + 2 + 2 * f], tonumber(ARGV[a + 3 + 2 * f]))
  end
  redis.call('PEXPIREAT', KEYS[k], tonumber(ARGV[a]))
  a = a + 2 + 2 * n
end
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[6]) end
if ARGV[5] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[7]) end
return 1
`);

/**
 * Where a call is and what a listing needs of it, in bounded bytes whatever its arguments' size:
 * its ended stub's head if it ended; else the head of its job's data (the call, short fields
 * first: see `serialize`), the queue holding it and whether a worker holds it (its BullMQ lock).
 * A session's call is found through its queue pointer (set when it was added).
 *   KEYS: ended stub, queue pointer, fast job hash, sandbox job hash
 *   ARGV: the queues' key prefix (`<prefix>:`), the call id
 *   → {'E', stub head} | {'J', queue name, data head, locked (1/0)} | false
 */
const BRIEF = new LuaScript(`
local stub = redis.call('GETRANGE', KEYS[1], 0, ${BRIEF_BYTES - 1})
if stub ~= '' then return {'E', stub} end
local name, key = 'fast', KEYS[3]
if redis.call('EXISTS', key) == 0 then
  name, key = 'sandbox', KEYS[4]
  if redis.call('EXISTS', key) == 0 then
    name = redis.call('GET', KEYS[2])
    if not name then return false end
    key = ARGV[1] .. name .. ':' .. ARGV[2]
  end
end
local data = redis.call('HGET', key, 'data')
if not data then return false end
return {'J', name, string.sub(data, 1, ${BRIEF_BYTES}), redis.call('EXISTS', key .. ':lock')}
`);

export type Admit =
  | { admitted: true; priority: number }
  | { admitted: false; inFlight: number; scope: 'client' | 'user' };

export type CallState =
  { state: 'waiting' | 'active'; job: CallJob } | { state: 'ended'; stub: EndedStub } | undefined;

export interface CallBriefState {
  tool: string;
  user?: string;
  acceptedAt: number;
  state: 'waiting' | 'active';
}

/** Options every call's job gets (BullMQ's `defaultJobOptions`). */
const JOB_OPTIONS: JobsOptions = {
  attempts: 1,
  // The job goes once it ends: the call's record (written by the worker) is its stored copy.
  removeOnComplete: true,
  // A failed job (its workers died twice, or it failed outside its tool) stays an hour for
  // the operators' dashboard; the ended stub answers lookups.
  removeOnFail: { age: 3600, count: 1000 },
};

/**
 * BullMQ's telemetry when tracing is on (bullmq-otel): a call's add is a producer span and its
 * run a consumer span of the call's trace. Off, BullMQ makes no spans at all.
 */
export function queueTelemetry(tracing: boolean): QueueOptions['telemetry'] {
  return tracing ? new BullMQOtel({ tracerName: 'toolgate.bullmq' }) : undefined;
}

/** The BullMQ options of every toolgate queue (a worker's are the same, plus its own). */
export function queueOptions(
  connection: RedisClient,
  keys: Keys,
  telemetry?: QueueOptions['telemetry'],
): QueueOptions {
  return {
    connection,
    prefix: keys.queuePrefix,
    defaultJobOptions: JOB_OPTIONS,
    streams: { events: { maxLen: EVENTS_MAX_LEN } },
    ...(telemetry ? { telemetry } : {}),
  };
}

export class CallQueue {
  /** The BullMQ queue (adds, removes, counts; the dashboard shows it). */
  readonly queue: Queue;
  private readonly other: QueueKind;
  /** Whether this is a worker's session queue (not one of the shared queues). */
  private readonly own: boolean;

  /**
   * @param name the BullMQ queue; default the kind's shared queue. A worker's session queue
   *   (`Keys.sessionQueue`) shares its kind's calls in flight and lookups, and serves its calls
   *   in the order they arrive (docs/sessions.md).
   */
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    readonly kind: QueueKind,
    readonly name: QueueName = kind,
    telemetry?: QueueOptions['telemetry'],
  ) {
    this.own = name !== kind;
    this.other = kind === 'fast' ? 'sandbox' : 'fast';
    this.queue = new Queue(name, queueOptions(redis, keys, telemetry));
    // Errors reach the callers of each operation; an unheard 'error' event would throw.
    this.queue.on('error', () => undefined);
  }

  /**
   * Admits the call against `limit` calls in flight (0: never refuse, for approved calls) and
   * adds its job at its fair priority. `upkeep` asks for the in-flight set's pruning and expiry
   * (once a second per client is enough; see Upkeep).
   */
  async enqueue(
    job: CallJob,
    limit: number,
    staleAfterMs: number,
    upkeep: boolean,
    /** A user's calls in flight (both queues); 0 or absent: none beyond the client's. */
    userLimit = 0,
  ): Promise<Admit> {
    const k = this.keys;
    const keys = [k.inFlight(job.clientId, this.kind), k.inFlight(job.clientId, this.other)];
    const args = [job.id, limit, staleAfterMs, upkeep ? 1 : 0, Date.now()];
    const user = job.user;
    const [ok, n, scope] = (
      user === undefined
        ? await ADMIT.run(this.redis, keys, args)
        : await ADMIT_USER.run(
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
    if (ok !== 1) return { admitted: false, inFlight: n, scope: scope === 1 ? 'user' : 'client' };
    const priority = this.own ? 1 : n;
    try {
      // A session's call is found by id through this pointer (lookups, cancels, listings).
      if (this.own) await this.redis.set(k.queueOf(job.id), this.name, 'PX', staleAfterMs);
      await this.queue.add(job.tool, serialize(job), {
        jobId: job.id,
        priority,
        timestamp: job.acceptedAt,
      });
    } catch (err) {
      await this.retract(job).catch(() => undefined);
      throw err;
    }
    return { admitted: true, priority };
  }

  /** Undoes an admission whose add failed: the call is not in flight. */
  private async retract(job: CallJob): Promise<void> {
    const k = this.keys;
    const multi = this.redis.multi().zrem(k.inFlight(job.clientId, this.kind), job.id);
    if (job.user !== undefined) {
      multi.zrem(k.userInFlight(job.clientId, this.kind, job.user), job.id);
    }
    await multi.exec();
  }

  /**
   * Ends a call on toolgate's side (see RELEASE): the waiting gateway hears its outcome. The
   * BullMQ job is completed or failed by the worker holding it (or removed: a lost session's).
   */
  async release(
    call: CallJob,
    outcome: { json: string; event: string },
    options: {
      failed?: string;
      /** Publish the outcome to the call's watchers here (else the record batch does). */
      publish?: boolean;
      /** What the call spent of its budgets (Budgets.charges). */
      charges?: BudgetCharges;
    } = {},
  ): Promise<void> {
    const k = this.keys;
    const stub: EndedStub = {
      ended: true,
      tool: call.tool,
      queue: this.kind,
      clientId: call.clientId,
      ...(call.user === undefined ? {} : { user: call.user }),
      acceptedAt: call.acceptedAt,
      ...(options.failed ? { failed: options.failed.slice(0, REASON_CHARS) } : {}),
    };
    await RELEASE.run(
      this.redis,
      [
        k.callIndex(call.clientId),
        k.inFlight(call.clientId, this.kind),
        k.running(call.clientId, this.kind),
        k.ended(call.id),
        // Unused without a user (no command runs on them), but named all the same.
        k.userInFlight(call.clientId, this.kind, call.user ?? ''),
        k.usersInFlight(call.clientId, this.kind),
        k.userRunning(call.clientId, call.user ?? ''),
        ...(options.charges?.keys ?? []),
      ],
      [
        call.id,
        JSON.stringify(stub),
        options.failed ? FAILED_STUB_MS : ENDED_STUB_MS,
        call.replyTo ?? '',
        options.publish === false ? '' : k.eventsChannel(call.id),
        outcome.json,
        outcome.event,
        Date.now(),
        // Only sandbox calls hold running leases.
        this.kind === 'sandbox' ? 1 : 0,
        call.user ?? '',
        ...(options.charges?.args ?? []),
      ],
    );
  }

  /**
   * Takes a call that has not started out of the queue (a cancel); its job, or undefined when
   * it was not waiting (a worker holds it, it ended, or it is not here). BullMQ refuses to
   * remove a job a worker holds, so exactly one of a cancel and a worker gets each call.
   */
  async remove(id: string): Promise<CallJob | undefined> {
    const job = await Job.fromId<CallJob>(this.queue, id);
    if (!job || job.finishedOn !== undefined) return undefined;
    // BullMQ's remove answers 1 for a job already gone: the first remover takes the call.
    const mark = this.keys.removed(id);
    if ((await this.redis.set(mark, '1', 'PX', REMOVED_MARK_MS, 'NX')) !== 'OK') return undefined;
    if ((await this.queue.remove(id, { removeChildren: false })) === 1) return job.data;
    // Held by a worker (locked): not removed, and a later remover may try again.
    await this.redis.del(mark);
    return undefined;
  }

  /**
   * Takes every call out of a lost worker's session queue (waiting, and held ones whose lock
   * lapsed with their worker), each removed by exactly one caller: their jobs. The queue's keys
   * go with its last call.
   */
  async drain(): Promise<CallJob[]> {
    const jobs = await this.queue.getJobs(['prioritized', 'wait', 'delayed', 'active']);
    const taken: CallJob[] = [];
    for (const job of jobs) {
      const call = job?.id ? await this.remove(job.id) : undefined;
      if (call) taken.push(call);
    }
    const left = await this.queue.getJobCountByTypes('prioritized', 'wait', 'delayed', 'active');
    if (left === 0) await this.queue.obliterate({ force: true }).catch(() => undefined);
    return taken;
  }

  /** Where a call is: waiting (or put back), held by a worker, ended, or unknown here. */
  async state(id: string): Promise<CallState> {
    const stub = await this.redis.get(this.keys.ended(id));
    if (stub) {
      const parsed = endedStub(stub);
      return parsed ? { state: 'ended', stub: parsed } : undefined;
    }
    const job = await Job.fromId<CallJob>(this.queue, id);
    if (!job) return undefined;
    const state = await job.getState();
    if (state === 'active') return { state: 'active', job: job.data };
    if (state === 'waiting' || state === 'prioritized' || state === 'delayed') {
      return { state: 'waiting', job: job.data };
    }
    return undefined;
  }

  /**
   * Calls waiting (BullMQ's wait and prioritized), put back for a moment (delayed), held by
   * workers (active), and failed jobs kept for the dashboard: BullMQ's own counts.
   */
  async counts(): Promise<{ waiting: number; delayed: number; active: number; failed: number }> {
    const c = await this.queue.getJobCounts('wait', 'prioritized', 'delayed', 'active', 'failed');
    return {
      waiting: (c.wait ?? 0) + (c.prioritized ?? 0),
      delayed: c.delayed ?? 0,
      active: c.active ?? 0,
      failed: c.failed ?? 0,
    };
  }

  /** Closes the BullMQ queue (not the shared connection). */
  async close(): Promise<void> {
    await this.queue.close();
  }
}

/** A job's hash in a BullMQ queue (for reads that must stay bounded: BRIEF). */
function jobKey(keys: Keys, name: QueueName, id: string): string {
  return `${keys.queuePrefix}:${name}:${id}`;
}

/** A call found in a queue by `briefCall`, or its ended stub. */
export type CallBriefFound = { ended: EndedStub } | { queue: QueueName; brief: CallBriefState };

/**
 * What a listing shows of a call, from whichever queue holds it, in one script and bounded
 * bytes (never its arguments): tool, accept time and state. Undefined when no queue has it.
 */
export async function briefCall(
  redis: RedisClient,
  keys: Keys,
  id: string,
): Promise<CallBriefFound | undefined> {
  const found = (await BRIEF.run(
    redis,
    [keys.ended(id), keys.queueOf(id), jobKey(keys, 'fast', id), jobKey(keys, 'sandbox', id)],
    [`${keys.queuePrefix}:`, id],
  )) as ['E', string] | ['J', QueueName, string, number] | null;
  if (!found) return undefined;
  if (found[0] === 'E') {
    const stub = endedStub(found[1]);
    return stub ? { ended: stub } : undefined;
  }
  const [, queue, head, locked] = found;
  const tool = /"tool":("(?:[^"\\]|\\.)*")/.exec(head)?.[1];
  const acceptedAt = /"acceptedAt":(\d+)/.exec(head)?.[1];
  if (tool === undefined || acceptedAt === undefined) return undefined;
  // Right after acceptedAt (see serialize), never a "user" inside the arguments.
  const user = /"acceptedAt":\d+,"user":("(?:[^"\\]|\\.)*")/.exec(head)?.[1];
  return {
    queue,
    brief: {
      tool: JSON.parse(tool) as string,
      ...(user === undefined ? {} : { user: JSON.parse(user) as string }),
      acceptedAt: Number(acceptedAt),
      state: locked === 1 ? 'active' : 'waiting',
    },
  };
}

/** An ended call's stub from its key's text; undefined if it is not one, or cut. */
export function endedStub(text: string): EndedStub | undefined {
  try {
    const stub = JSON.parse(text) as EndedStub;
    return stub?.ended === true ? stub : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A job's data as stored: its short fields first, its arguments last, so a brief reads bounded
 * bytes per call whatever the arguments' size (BullMQ keeps the key order of the object).
 */
function serialize(job: CallJob): CallJob {
  const { id, tool, clientId, acceptedAt, user, args, ...rest } = job;
  return { id, tool, clientId, acceptedAt, ...(user === undefined ? {} : { user }), ...rest, args };
}
