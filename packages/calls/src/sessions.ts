/**
 * Sessions in Redis (docs/sessions.md): who owns one, which tool and worker it has, when it
 * expires; the per-client cap; which workers host sessions and are alive; and what is left of
 * a lost worker's sessions. Gateways and workers share this class; the sandbox itself lives
 * only in its worker.
 */
import { randomUUID } from 'node:crypto';
import { principal, type Keys } from './keys.js';
import { outcomeEvent } from './events.js';
import { CallQueue } from './call-queue.js';
import type { RedisClient } from './redis.js';
import { LuaScript } from './script.js';
import type { CallJob, CallOutcome } from './types.js';

export type SessionTool = 'run_python' | 'run_shell';
export const SESSION_TOOLS: readonly SessionTool[] = ['run_python', 'run_shell'];

/** A session as its owner lists it (GET /v1/sessions). */
export interface SessionInfo {
  id: string;
  tool: SessionTool;
  /** Epoch ms. */
  createdAt: number;
  lastUsedAt: number;
  /** When it ends unless used before: its idle end, or its lifetime's end if sooner. */
  expiresAt: number;
  /** Memory its sandbox used when its worker last looked (every 10 s), if it has started. */
  memoryBytes?: number;
  /** The user it was created for (an OAuth token's user); absent: the client's API key. */
  user?: string;
}

export interface SessionRecord extends SessionInfo {
  clientId: string;
  /** The worker whose sandbox it is (and whose queue its calls go to). */
  workerId: string;
  /** The end of its lifetime (sessions.maxLifetimeSeconds after creation). */
  endsAt: number;
  /** Its sandbox was started once: a worker without it has lost it. */
  opened: boolean;
  /** Its worker was lost (the reaper marked it): its next call answers `session_lost`. */
  lost: boolean;
}

export type SessionCreate =
  | { created: true; id: string; expiresAt: number }
  /** Refused: the client's cap (`limits.sessions`), or the user's (`limits.perUser.sessions`). */
  | { created: false; sessions: number; scope: 'client' | 'user' };

const FIELDS = [
  'client',
  'tool',
  'worker',
  'createdAt',
  'lastUsedAt',
  'expiresAt',
  'endsAt',
  'opened',
  'lost',
  'memoryBytes',
  'user',
] as const;

/**
 * Checks the client's cap (and the user's, when one is set) and creates the session in one
 * step (a check and its increment split by an await would let two requests both pass at
 * cap − 1). The user's count reads the owners of the client's live sessions, at most its cap
 * (`limits.sessions`), so it needs no key of its own.
 *   KEYS: client's sessions, session, host's sessions
 *   ARGV: id, cap, client, tool, worker, idle ms, lifetime ms, user ('' = none), user cap
 *     (0 = none), session prefix
 *   → {1, expiresAt}, {0, sessions} (client's cap) or {-1, sessions} (the user's cap)
 */
const CREATE_FUNCTION = `
local function create()
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local n = redis.call('ZCARD', KEYS[1])
  if n >= tonumber(ARGV[2]) then return {0, n} end
  local userCap = tonumber(ARGV[9])
  if ARGV[8] ~= '' and userCap > 0 then
    local mine = 0
    for _, other in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
      if redis.call('HGET', ARGV[10] .. other, 'user') == ARGV[8] then mine = mine + 1 end
    end
    if mine >= userCap then return {-1, mine} end
  end
  local life = tonumber(ARGV[7])
  local ends = now + life
  local expires = math.min(now + tonumber(ARGV[6]), ends)
  redis.call('HSET', KEYS[2], 'client', ARGV[3], 'tool', ARGV[4], 'worker', ARGV[5],
    'createdAt', now, 'lastUsedAt', now, 'expiresAt', expires, 'endsAt', ends, 'opened', 0)
  if ARGV[8] ~= '' then redis.call('HSET', KEYS[2], 'user', ARGV[8]) end
  redis.call('PEXPIREAT', KEYS[2], expires)
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], life)
  redis.call('SADD', KEYS[3], ARGV[1])
  redis.call('PEXPIRE', KEYS[3], life)
  return {1, expires}
end
`;
const CREATE = new LuaScript(`${CREATE_FUNCTION}
return create()
`);

/**
 * A bridge conversation's session: the one it has while that still exists, else a new one
 * (as CREATE, caps included), remembered for the conversation. One script, so two calls of
 * one message that both find none create one session, not two.
 *   KEYS: as CREATE, then the conversation's key; ARGV: as CREATE
 *   → {2, id} (its session), {1, id} (created), {0, sessions} (the client's cap) or
 *     {-1, sessions} (the user's)
 */
const FOR_CONVERSATION = new LuaScript(`${CREATE_FUNCTION}
local known = redis.call('GET', KEYS[4])
if known and redis.call('EXISTS', ARGV[10] .. known) == 1 then return {2, known} end
local made = create()
if made[1] ~= 1 then return made end
redis.call('SET', KEYS[4], ARGV[1], 'PX', tonumber(ARGV[7]))
return {1, ARGV[1]}
`);

/**
 * A call used the session: its idle end moves on (never past its lifetime's end).
 *   KEYS: session, client's sessions; ARGV: id, idle ms, opened (1: mark its sandbox started)
 *   → the new expiresAt, or 0 when the session is gone
 */
const TOUCH = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ends = tonumber(redis.call('HGET', KEYS[1], 'endsAt')) or now
local expires = math.min(now + tonumber(ARGV[2]), ends)
redis.call('HSET', KEYS[1], 'lastUsedAt', now, 'expiresAt', expires)
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'opened', 1) end
redis.call('PEXPIREAT', KEYS[1], expires)
redis.call('ZADD', KEYS[2], 'XX', expires, ARGV[1])
return expires
`);

/** Records a live session's memory (not a removed one's: that would bring its hash back). */
const MEMORY = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'memoryBytes', ARGV[1]) end
return 0
`);

/**
 * Removes a session if `ARGV[2]` owns it ('' = whoever does) and, when `ARGV[5]` is '1', if it
 * is `ARGV[6]`'s (a user's; '' = the client's API key's): its hash, its place in its client's
 * and its host's sets; tells its host to kill the sandbox.
 *   KEYS: session, kill channel (published to); ARGV: id, client ('' = any), client-set
 *   prefix, host-set prefix, match the user (1/0), user
 *   → the host worker's id, or false when there was no such session (of that owner)
 */
const REMOVE = new LuaScript(`
local owner = redis.call('HGET', KEYS[1], 'client')
if not owner or (ARGV[2] ~= '' and owner ~= ARGV[2]) then return false end
if ARGV[5] == '1' and (redis.call('HGET', KEYS[1], 'user') or '') ~= ARGV[6] then return false end
local worker = redis.call('HGET', KEYS[1], 'worker')
redis.call('DEL', KEYS[1])
redis.call('ZREM', ARGV[3] .. owner, ARGV[1])
redis.call('SREM', ARGV[4] .. worker, ARGV[1])
redis.call('PUBLISH', KEYS[2], cjson.encode({id = ARGV[1]}))
return worker
`);

/**
 * Forgets a lost worker: its sessions leave their clients' sets (they no longer count against
 * the cap) and are marked lost (their next call answers `session_lost`; the hash expires as
 * it would have), its set of them and its beat go. Returns how many sessions it had.
 *   KEYS: host's sessions, hosts; ARGV: worker id, session prefix, client-set prefix
 */
const FORGET_HOST = new LuaScript(`
local ids = redis.call('SMEMBERS', KEYS[1])
for _, id in ipairs(ids) do
  local owner = redis.call('HGET', ARGV[2] .. id, 'client')
  if owner then
    redis.call('ZREM', ARGV[3] .. owner, id)
    redis.call('HSET', ARGV[2] .. id, 'lost', 1)
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return #ids
`);

/** What a new session is for and the caps it is checked against (SessionStore.create). */
export interface SessionCreateOptions {
  clientId: string;
  /** The user it is for (an OAuth token's user); absent: the client as a whole. */
  user?: string;
  tool: SessionTool;
  workerId: string;
  cap: number;
  /** `limits.perUser.sessions`: one user's sessions of the client; absent: the client's cap only. */
  userCap?: number;
  idleMs: number;
  lifetimeMs: number;
}

export class SessionStore {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    /**
     * worker.lostCallTimeoutMs: a host whose beat is older than half of it is lost (as a
     * call's lease lapses), so a session's next call hears `session_lost` within it.
     */
    private readonly lostAfterMs: number,
  ) {}

  /** How long a host's beat counts (half of worker.lostCallTimeoutMs, as a call's lease). */
  get aliveMs(): number {
    return Math.round(this.lostAfterMs / 2);
  }

  async create(o: SessionCreateOptions): Promise<SessionCreate> {
    const id = randomUUID();
    const [ok, n] = (await CREATE.run(
      this.redis,
      this.createKeys(id, o),
      this.createArgs(id, o),
    )) as [number, number];
    if (ok === 1) return { created: true, id, expiresAt: n };
    return { created: false, sessions: n, scope: ok === -1 ? 'user' : 'client' };
  }

  /** CREATE's keys: the client's sessions, the new session, its host's sessions. */
  private createKeys(id: string, o: SessionCreateOptions): string[] {
    return [
      this.keys.clientSessions(o.clientId),
      this.keys.session(id),
      this.keys.hostSessions(o.workerId),
    ];
  }

  /** CREATE's arguments (FOR_CONVERSATION takes the same). */
  private createArgs(id: string, o: SessionCreateOptions): (string | number)[] {
    return [
      id,
      o.cap,
      o.clientId,
      o.tool,
      o.workerId,
      o.idleMs,
      o.lifetimeMs,
      o.user ?? '',
      o.user === undefined ? 0 : (o.userCap ?? 0),
      this.keys.sessionPrefix,
    ];
  }

  /**
   * The session of a client's bridge conversation for `tool` (docs/sessions.md#conversations):
   * the existing one, or one created as `create` does on `workerId`.
   */
  async forConversation(
    o: SessionCreateOptions & { conversationId: string },
  ): Promise<
    | { id: string; created: boolean }
    | { created: false; sessions: number; scope: 'client' | 'user' }
  > {
    const id = randomUUID();
    const [status, value] = (await FOR_CONVERSATION.run(
      this.redis,
      [
        ...this.createKeys(id, o),
        // A user's conversations are its own: their key names the user.
        this.keys.conversationSession(principal(o.clientId, o.user), o.tool, o.conversationId),
      ],
      this.createArgs(id, o),
    )) as [number, string | number];
    if (status === 0 || status === -1)
      return { created: false, sessions: Number(value), scope: status === -1 ? 'user' : 'client' };
    return { id: String(value), created: status === 1 };
  }

  /** The conversation's session id, if it has one that still exists (no side effects). */
  async ofConversation(
    clientId: string,
    tool: SessionTool,
    conversationId: string,
    user?: string,
  ): Promise<string | undefined> {
    const id = await this.redis.get(
      this.keys.conversationSession(principal(clientId, user), tool, conversationId),
    );
    return id && (await this.redis.exists(this.keys.session(id))) === 1 ? id : undefined;
  }

  /**
   * Every client's sessions, for admins (GET /v1/admin/sessions): read host by host with
   * SSCAN, stopping at `limit`, so a page costs its size whatever the total. `total` counts
   * the hosts' sets (SCARD), which may still hold a few just-expired ids.
   */
  async listAll(
    limit: number,
  ): Promise<{ sessions: SessionRecord[]; total: number; truncated: boolean }> {
    const hosts = await this.redis.zrange(this.keys.sessionHosts, 0, -1);
    const ids: string[] = [];
    let total = 0;
    for (const host of hosts) {
      const key = this.keys.hostSessions(host);
      total += await this.redis.scard(key);
      let cursor = '0';
      do {
        if (ids.length >= limit) break;
        const [next, batch] = await this.redis.sscan(key, cursor, 'COUNT', 100);
        ids.push(...batch.slice(0, limit - ids.length));
        cursor = next;
      } while (cursor !== '0');
    }
    const truncated = ids.length >= limit && total > limit;
    if (ids.length === 0) return { sessions: [], total, truncated };
    const multi = this.redis.multi();
    for (const id of ids) multi.hmget(this.keys.session(id), ...FIELDS);
    const rows = ((await multi.exec()) ?? []) as [unknown, (string | null)[]][];
    const sessions = rows
      .map(([, values], i) => recordOf(ids[i]!, values))
      .filter((r): r is SessionRecord => r !== undefined && r.expiresAt > Date.now())
      .sort((a, b) => a.createdAt - b.createdAt);
    return { sessions, total, truncated };
  }

  async get(id: string): Promise<SessionRecord | undefined> {
    const values = await this.redis.hmget(this.keys.session(id), ...FIELDS);
    return recordOf(id, values);
  }

  /**
   * The client's live sessions (at most its cap: reads a few short hashes); with `user`, only
   * that user's (null: only the client's API key's own; undefined: all of the client's).
   */
  async list(clientId: string, user?: string | null): Promise<SessionInfo[]> {
    const ids = await this.redis.zrangebyscore(
      this.keys.clientSessions(clientId),
      Date.now(),
      '+inf',
    );
    if (ids.length === 0) return [];
    const multi = this.redis.multi();
    for (const id of ids) multi.hmget(this.keys.session(id), ...FIELDS);
    const rows = ((await multi.exec()) ?? []) as [unknown, (string | null)[]][];
    const out: SessionInfo[] = [];
    rows.forEach(([, values], i) => {
      const record = recordOf(ids[i]!, values);
      if (
        record &&
        record.clientId === clientId &&
        (user === undefined || (record.user ?? null) === user)
      ) {
        const { id, tool, createdAt, lastUsedAt, expiresAt, memoryBytes, user: owner } = record;
        out.push({
          id,
          tool,
          createdAt,
          lastUsedAt,
          expiresAt,
          ...(memoryBytes === undefined ? {} : { memoryBytes }),
          ...(owner === undefined ? {} : { user: owner }),
        });
      }
    });
    return out;
  }

  /** Moves the idle end on; 0 when the session is gone (deleted or expired). */
  async touch(
    session: Pick<SessionRecord, 'id' | 'clientId'>,
    idleMs: number,
    opened = false,
  ): Promise<number> {
    return Number(
      await TOUCH.run(
        this.redis,
        [this.keys.session(session.id), this.keys.clientSessions(session.clientId)],
        [session.id, idleMs, opened ? 1 : 0],
      ),
    );
  }

  /** Its worker's latest reading of the session's sandbox memory. */
  async setMemory(id: string, bytes: number): Promise<void> {
    await MEMORY.run(this.redis, [this.keys.session(id)], [Math.round(bytes)]);
  }

  /**
   * Removes the session (of `clientId`, if given; and of `user` if given, null meaning the
   * client's API key's own); its host's worker id, or undefined.
   */
  async remove(id: string, clientId?: string, user?: string | null): Promise<string | undefined> {
    const worker = (await REMOVE.run(
      this.redis,
      [this.keys.session(id), this.keys.sessionKills],
      [
        id,
        clientId ?? '',
        this.keys.clientSessionsPrefix,
        this.keys.hostSessionsPrefix,
        user === undefined ? 0 : 1,
        user ?? '',
      ],
    )) as string | null;
    return worker ?? undefined;
  }

  /** A worker's beat as a session host. */
  async beat(workerId: string): Promise<void> {
    await this.redis.zadd(this.keys.sessionHosts, Date.now(), workerId);
  }

  /** A worker stopping on purpose: its sessions are lost from now on. */
  async leave(workerId: string): Promise<void> {
    await this.redis.zrem(this.keys.sessionHosts, workerId);
  }

  async alive(workerId: string): Promise<boolean> {
    const score = await this.redis.zscore(this.keys.sessionHosts, workerId);
    return score !== null && Number(score) > Date.now() - this.aliveMs;
  }

  /** The live host with the fewest sessions (ties at random), or undefined if there is none. */
  async pickHost(): Promise<string | undefined> {
    const hosts = await this.redis.zrangebyscore(
      this.keys.sessionHosts,
      Date.now() - this.aliveMs,
      '+inf',
    );
    if (hosts.length === 0) return undefined;
    const multi = this.redis.multi();
    for (const host of hosts) multi.scard(this.keys.hostSessions(host));
    const counts = ((await multi.exec()) ?? []).map(([, n]) => Number(n));
    const fewest = Math.min(...counts);
    const best = hosts.filter((_, i) => counts[i] === fewest);
    return best[Math.floor(Math.random() * best.length)];
  }

  /** Hosts whose beat stopped (older than aliveMs), at most `limit`. */
  async lostHosts(limit = 100): Promise<string[]> {
    return this.redis.zrangebyscore(
      this.keys.sessionHosts,
      '-inf',
      Date.now() - this.aliveMs,
      'LIMIT',
      0,
      limit,
    );
  }

  /**
   * What is left of a lost worker: each call in its session queue ends `session_lost` (its
   * waiting gateway hears at once), then its sessions are forgotten. Any gateway or worker may
   * run it; each call is removed from the queue by exactly one of them (BullMQ's remove), so
   * each call ends once. Returns the calls ended.
   */
  async reapHost(workerId: string): Promise<number> {
    const queue = new CallQueue(this.redis, this.keys, 'sandbox', this.keys.sessionQueue(workerId));
    let jobs;
    try {
      jobs = await queue.drain();
      await Promise.all(
        jobs.map((job) => {
          const outcome = sessionLostOutcome(job);
          return queue.release(
            job,
            { json: JSON.stringify(outcome), event: JSON.stringify(outcomeEvent(outcome)) },
            // Its own code kept: a gateway that reads this stub (not the reply) says the same.
            { failed: `session_lost: ${sessionLostMessage(job)}` },
          );
        }),
      );
    } finally {
      await queue.close().catch(() => undefined);
    }
    await FORGET_HOST.run(
      this.redis,
      [this.keys.hostSessions(workerId), this.keys.sessionHosts],
      [workerId, this.keys.sessionPrefix, this.keys.clientSessionsPrefix],
    );
    return jobs.length;
  }
}

function sessionLostMessage(job: Pick<CallJob, 'session'>): string {
  return `session ${job.session?.id ?? ''} is gone: the worker hosting it stopped; start a new session`;
}

export function sessionLostOutcome(job: Pick<CallJob, 'id' | 'tool' | 'session'>): CallOutcome {
  return {
    id: job.id,
    tool: job.tool,
    status: 'error',
    error: { code: 'session_lost', message: sessionLostMessage(job) },
    durationMs: 0,
    cached: false,
  };
}

function recordOf(id: string, values: (string | null)[]): SessionRecord | undefined {
  const [
    client,
    tool,
    worker,
    createdAt,
    lastUsedAt,
    expiresAt,
    endsAt,
    opened,
    lost,
    memory,
    user,
  ] = values;
  if (!client || !tool || !worker) return undefined;
  return {
    id,
    clientId: client,
    tool: tool as SessionTool,
    workerId: worker,
    createdAt: Number(createdAt),
    lastUsedAt: Number(lastUsedAt),
    expiresAt: Number(expiresAt),
    endsAt: Number(endsAt),
    opened: opened === '1',
    lost: lost === '1',
    ...(memory ? { memoryBytes: Number(memory) } : {}),
    ...(user ? { user } : {}),
  };
}
