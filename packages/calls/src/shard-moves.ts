/**
 * The Redis side of moving a client from one shard to another (docs/sharding.md, "Moving a
 * client"): the placements and move leases on the home shard, and the copy of a client's
 * durable keys from its old shard to its new one.
 */
import type { Keys } from './keys.js';
import type { RedisClient } from './redis.js';
import { LuaScript } from './script.js';
import type { QueueKind } from './types.js';

/**
 * A move's states: `draining` (new calls wait, calls in flight end), `copying`, `cleaning`
 * (placement flipped, calls admitted on the new shard, the old copies being deleted), then
 * `done` or `failed`.
 */
export type ShardMoveState = 'draining' | 'copying' | 'cleaning' | 'done' | 'failed';

export interface ShardMoveRecord {
  id: string;
  client: string;
  from: string;
  to: string;
  state: ShardMoveState;
  /** The client's calls still in flight on the old shard (when last counted). */
  inFlight: number;
  /** Keys copied to the new shard so far. */
  keysCopied: number;
  /** Keys (and hash fields, set members) deleted from the old shard. */
  keysDeleted: number;
  startedAt: string;
  endedAt?: string;
  error?: string;
}

/** A move record is kept this long after it ends, for `GET /v1/shards/moves/{id}`. */
const MOVE_RECORD_TTL_SECONDS = 86_400;

const QUEUES: readonly QueueKind[] = ['fast', 'sandbox'];

// KEYS: lease, moving, move record, events. ARGV: client, move id, lease ms, record fields (JSON
// pairs). A client with a lease has a move running: its id is answered and nothing changes.
const BEGIN = new LuaScript(`
local running = redis.call('GET', KEYS[1])
if running then return {0, running} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local fields = cjson.decode(ARGV[4])
for i = 1, #fields, 2 do redis.call('HSET', KEYS[3], fields[i], fields[i + 1]) end
redis.call('PUBLISH', KEYS[4], ARGV[1])
return {1, ARGV[2]}
`);

// KEYS: lease. ARGV: move id, lease ms. 0: the lease is another move's, or gone.
const RENEW = new LuaScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`);

// KEYS: lease, moving, move record, events, placements. ARGV: client, move id, new shard (or ''
// for no flip), end state, error, ended at, record ttl s. Ends a move: the lease and the
// "moving" mark go (if still this move's), the placement is set when the move did its copy.
const FINISH = new LuaScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[3]) end
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[2], ARGV[1]) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[3], 'state', ARGV[4], 'endedAt', ARGV[6])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[3], 'error', ARGV[5]) end
redis.call('EXPIRE', KEYS[3], ARGV[7])
redis.call('PUBLISH', KEYS[4], ARGV[1])
return 1
`);

// KEYS: lease, moving, move record, events. ARGV: client, move id, ended at, record ttl s.
// A move whose gateway is gone (its lease expired before it flipped the placement): the client
// stays where it was and its calls are admitted again.
const ABANDON = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'state', 'failed', 'endedAt', ARGV[3],
    'error', 'the gateway running the move stopped before it finished; the client stays where it was')
  redis.call('EXPIRE', KEYS[3], ARGV[4])
end
redis.call('PUBLISH', KEYS[4], ARGV[1])
return 1
`);

/**
 * Placements and moves on the home shard: which clients a move put elsewhere, which are
 * moving now, and each move's record. Every gateway reads them; one runs each move.
 */
export class ShardPlacements {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /** The placements moves made, and the clients moving now (client → move id). */
  async read(): Promise<{ placements: Map<string, string>; moving: Map<string, string> }> {
    const [placements, moving] = await Promise.all([
      this.redis.hgetall(this.keys.shardPlacements),
      this.redis.hgetall(this.keys.shardMoving),
    ]);
    return {
      placements: new Map(Object.entries(placements)),
      moving: new Map(Object.entries(moving)),
    };
  }

  /**
   * Starts a move unless one runs for the client: its record is written, the client marked
   * moving (gateways hold its new calls) and the lease taken. Answers the running move's id
   * when there is one.
   */
  async begin(
    move: ShardMoveRecord,
    leaseMs: number,
  ): Promise<{ started: true } | { started: false; running: string }> {
    const fields = Object.entries(move).flatMap(([k, v]) => [k, String(v)]);
    const [started, id] = (await BEGIN.run(
      this.redis,
      [
        this.keys.shardMoveLease(move.client),
        this.keys.shardMoving,
        this.keys.shardMove(move.id),
        this.keys.shardPlacementEvents,
      ],
      [move.client, move.id, leaseMs, JSON.stringify(fields)],
    )) as [number, string];
    return started === 1 ? { started: true } : { started: false, running: id };
  }

  /** Keeps the move's lease; false when it is lost (another gateway abandoned the move). */
  async renew(client: string, id: string, leaseMs: number): Promise<boolean> {
    return (await RENEW.run(this.redis, [this.keys.shardMoveLease(client)], [id, leaseMs])) === 1;
  }

  async progress(
    id: string,
    fields: Partial<
      Pick<
        ShardMoveRecord,
        'state' | 'inFlight' | 'keysCopied' | 'keysDeleted' | 'endedAt' | 'error'
      >
    >,
  ): Promise<void> {
    await this.redis.hset(
      this.keys.shardMove(id),
      Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, String(v)])),
    );
  }

  /**
   * Ends a move's hold: `to` set flips the client's placement there in the same step as its "moving"
   * mark goes (so its held calls go to the new shard). False when the lease was lost.
   */
  async finish(
    move: Pick<ShardMoveRecord, 'id' | 'client'>,
    end: { state: 'cleaning' | 'failed'; to?: string; error?: string },
  ): Promise<boolean> {
    return (
      (await FINISH.run(
        this.redis,
        [
          this.keys.shardMoveLease(move.client),
          this.keys.shardMoving,
          this.keys.shardMove(move.id),
          this.keys.shardPlacementEvents,
          this.keys.shardPlacements,
        ],
        [
          move.client,
          move.id,
          end.to ?? '',
          end.state,
          end.error ?? '',
          new Date().toISOString(),
          MOVE_RECORD_TTL_SECONDS,
        ],
      )) === 1
    );
  }

  /** Rolls back the moves of `moving` whose lease is gone; answers the clients released. */
  async abandonLost(moving: ReadonlyMap<string, string>): Promise<string[]> {
    const released: string[] = [];
    for (const [client, id] of moving) {
      const done = await ABANDON.run(
        this.redis,
        [
          this.keys.shardMoveLease(client),
          this.keys.shardMoving,
          this.keys.shardMove(id),
          this.keys.shardPlacementEvents,
        ],
        [client, id, new Date().toISOString(), MOVE_RECORD_TTL_SECONDS],
      );
      if (done === 1) released.push(client);
    }
    return released;
  }

  async get(id: string): Promise<ShardMoveRecord | undefined> {
    const h = await this.redis.hgetall(this.keys.shardMove(id));
    if (!h.id) return undefined;
    return {
      id: h.id,
      client: h.client ?? '',
      from: h.from ?? '',
      to: h.to ?? '',
      state: (h.state ?? 'failed') as ShardMoveState,
      inFlight: Number(h.inFlight ?? 0),
      keysCopied: Number(h.keysCopied ?? 0),
      keysDeleted: Number(h.keysDeleted ?? 0),
      startedAt: h.startedAt ?? '',
      ...(h.endedAt ? { endedAt: h.endedAt } : {}),
      ...(h.error ? { error: h.error } : {}),
    };
  }
}

/** One shard's Redis and key names. */
export interface ShardSide {
  redis: RedisClient;
  keys: Keys;
}

/**
 * How many of the client's calls the old shard still has in flight: accepted and not ended,
 * running, or parked for an approval. A move copies once this is 0.
 */
export async function callsInFlight(side: ShardSide, client: string): Promise<number> {
  const multi = side.redis.multi();
  for (const kind of QUEUES) {
    multi.zcard(side.keys.inFlight(client, kind));
    multi.zcard(side.keys.running(client, kind));
  }
  multi.zcard(side.keys.clientApprovals(client));
  const answers = (await multi.exec()) ?? [];
  return answers.reduce((n, [err, v]) => n + (err ? 0 : Number(v)), 0);
}

/** What a client owns on a shard and a move takes along (docs/sharding.md lists them). */
interface ClientData {
  /** Whole keys (DUMP/RESTORE with their TTL), named on the old shard. */
  keys: string[];
  /** Fields of shared hashes: hash key name (old) → fields. */
  hashFields: Map<string, string[]>;
  /** Members of shared sets: set key name (old) → members. */
  setMembers: Map<string, string[]>;
}

const SCAN_COUNT = 500;
const BATCH = 100;

/** A glob pattern matching `text` literally. */
const literal = (text: string) => text.replace(/[*?[\]\\]/g, '\\$&');

async function scanKeys(redis: RedisClient, match: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', match, 'COUNT', SCAN_COUNT);
    cursor = next;
    found.push(...keys);
  } while (cursor !== '0');
  return found;
}

async function scanMembers(
  redis: RedisClient,
  kind: 'hscan' | 'sscan',
  key: string,
  matches: string[],
): Promise<string[]> {
  const found = new Set<string>();
  for (const match of matches) {
    let cursor = '0';
    do {
      const [next, items] = await redis[kind](key, cursor, 'MATCH', match, 'COUNT', SCAN_COUNT);
      cursor = next;
      // HSCAN answers field, value pairs.
      const names = kind === 'hscan' ? items.filter((_, i) => i % 2 === 0) : items;
      for (const n of names) found.add(n);
    } while (cursor !== '0');
  }
  return [...found];
}

/** Finds the client's durable data on a shard (SCAN in bounded steps; no KEYS). */
async function clientData({ redis, keys: k }: ShardSide, client: string): Promise<ClientData> {
  const c = literal(client);
  const p = literal(k.prefix);
  const keys = new Set<string>();
  const add = async (name: string) => {
    if ((await redis.exists(name)) === 1) keys.add(name);
  };
  const secrets = k.secrets(client);
  const userStats = k.userStats(client);
  for (const name of [
    k.callIndex(client),
    k.audit(client),
    secrets.values,
    secrets.times,
    userStats.counts,
    userStats.seen,
  ])
    await add(name);
  const patterns = [
    `${p}:budget:${c}:*`,
    `${p}:budget-user:${c}:*`,
    `${p}:secret:${c}:u:*`,
    `${p}:secret-at:${c}:u:*`,
    `${p}:stats:client:${c}:*`,
  ];
  for (const pattern of patterns) for (const key of await scanKeys(redis, pattern)) keys.add(key);
  // The memory tool's entries, its users' too (`<client>@<user>`), on the base with a tag each.
  const memory = k.memory(client);
  await add(memory.entries);
  await add(memory.version);
  const userMemory = k.memory(`${client}@`).entries.slice(0, -1); // `…:memory:{<client>@`
  for (const key of await scanKeys(redis, `${literal(userMemory)}*`)) keys.add(key);
  // The console's minutes: `series:<minute>:<client>` and its `:users`, not other clients'.
  const seriesRoot = `${k.prefix}:series:`;
  for (const key of await scanKeys(redis, `${p}:series:*:${c}*`)) {
    const parts = key.slice(seriesRoot.length).split(':');
    if (parts[1] === client && (parts.length === 2 || (parts.length === 3 && parts[2] === 'users')))
      keys.add(key);
  }
  // The records of its recent calls still in their TTL (what /v1/calls lists).
  const calls = await redis.zrange(k.callIndex(client), 0, -1);
  for (let i = 0; i < calls.length; i += BATCH) {
    const ids = calls.slice(i, i + BATCH);
    const names = ids.flatMap((id) => [k.call(id), k.callBrief(id)]);
    const exists = await Promise.all(names.map((n) => redis.exists(n)));
    names.forEach((n, j) => exists[j] === 1 && keys.add(n));
  }
  const hashFields = new Map<string, string[]>();
  const resets = await scanMembers(redis, 'hscan', k.workspaceResets, [c, `${c}@*`]);
  if (resets.length > 0) hashFields.set(k.workspaceResets, resets);
  const setMembers = new Map<string, string[]>();
  const owners = await scanMembers(redis, 'sscan', k.secretOwners, [c, `${c}:u:*`]);
  if (owners.length > 0) setMembers.set(k.secretOwners, owners);
  if ((await redis.sismember(k.auditClients, client)) === 1)
    setMembers.set(k.auditClients, [client]);
  return { keys: [...keys], hashFields, setMembers };
}

/**
 * The name a key of the old shard has on the new one (the shards' prefixes may differ): keys on
 * the root (the hash-tagged prefix on a cluster) or on the base (the memory tool's).
 */
function renamed(key: string, from: Keys, to: Keys): string {
  if (key.startsWith(`${from.prefix}:`)) return to.prefix + key.slice(from.prefix.length);
  if (key.startsWith(`${from.base}:`)) return to.base + key.slice(from.base.length);
  return key;
}

/**
 * Copies the client's durable data from one shard to the other: whole keys by DUMP/RESTORE
 * with their remaining TTL (REPLACE: a move back overwrites what an earlier one left), fields
 * of the shared hashes and members of the shared sets one by one. Answers what to delete from
 * the old shard once the placement is flipped.
 */
export async function copyClientData(
  from: ShardSide,
  to: ShardSide,
  client: string,
  onProgress: (copied: number) => Promise<void> | void,
): Promise<ClientData & { count: number }> {
  const data = await clientData(from, client);
  let copied = 0;
  for (let i = 0; i < data.keys.length; i += BATCH) {
    const batch = data.keys.slice(i, i + BATCH);
    const read = from.redis.pipeline();
    for (const key of batch) {
      read.dumpBuffer(key);
      read.pttl(key);
    }
    const answers = (await read.exec()) ?? [];
    const write = to.redis.pipeline();
    batch.forEach((key, j) => {
      const dump = answers[2 * j]?.[1] as Buffer | null | undefined;
      const ttl = Number(answers[2 * j + 1]?.[1] ?? -1);
      if (!dump || ttl === -2) return; // gone meanwhile (expired)
      write.restore(renamed(key, from.keys, to.keys), ttl > 0 ? ttl : 0, dump, 'REPLACE');
      copied++;
    });
    for (const [err] of (await write.exec()) ?? []) if (err) throw err;
    await onProgress(copied);
  }
  for (const [hash, fields] of data.hashFields) {
    const values = await from.redis.hmget(hash, ...fields);
    const pairs = fields.flatMap((f, j) => (values[j] == null ? [] : [f, values[j]!]));
    if (pairs.length > 0) await to.redis.hset(renamed(hash, from.keys, to.keys), ...pairs);
  }
  for (const [set, members] of data.setMembers)
    await to.redis.sadd(renamed(set, from.keys, to.keys), ...members);
  return { ...data, count: copied };
}

/** Deletes what `copyClientData` copied from the old shard; answers how many things went. */
export async function deleteClientData(from: ShardSide, data: ClientData): Promise<number> {
  let deleted = 0;
  for (let i = 0; i < data.keys.length; i += BATCH)
    deleted += await from.redis.unlink(...data.keys.slice(i, i + BATCH));
  for (const [hash, fields] of data.hashFields) deleted += await from.redis.hdel(hash, ...fields);
  for (const [set, members] of data.setMembers) deleted += await from.redis.srem(set, ...members);
  return deleted;
}
