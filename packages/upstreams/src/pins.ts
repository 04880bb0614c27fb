/**
 * Pins of upstream tool definitions (docs/upstreams.md, "Trust and quarantine"): per tool, the
 * sha256 of the definition the upstream serves now and of the one an admin approved, with the
 * definitions they name. Scripts, so a refresh and an approval never overwrite each other.
 */
import { canonicalDigest, type Keys, type RedisClient } from '@toolgate/calls';
import type { UpstreamToolDefinition } from './tool.js';

export type PinStatus = 'approved' | 'pending' | 'quarantined';

/** One tool's pin as stored (JSON in `Keys.upstream(id).pins`, field `t:<tool>`). */
export interface PinEntry {
  /** The hash of the definition the upstream serves now. */
  current: string;
  /** The hash an admin (or `trust: auto`) accepted; absent: never approved. */
  approved?: string;
  /** Who approved it: an admin client's id, or `auto`. */
  by?: string;
  approvedAt?: number;
  /** When this tool was first seen (ms). */
  seenAt: number;
  /** When its definition last changed (ms). */
  changedAt?: number;
}

/** What a refresh found: each becomes an audit entry. */
export interface PinEvent {
  tool: string;
  kind: 'first_seen' | 'changed' | 'quarantined' | 'approved' | 'removed';
  hash: string;
}

export type ApproveResult =
  | { kind: 'approved'; entry: PinEntry }
  | { kind: 'unchanged'; entry: PinEntry }
  | { kind: 'unknown' }
  | { kind: 'conflict'; current: string };

/** The sha256 of a definition's canonical JSON (keys sorted): what is pinned and approved. */
export function definitionHash(def: UpstreamToolDefinition): string {
  return canonicalDigest(def);
}

export function pinStatus(entry: PinEntry | undefined, hash: string): PinStatus {
  if (!entry?.approved) return 'pending';
  return entry.approved === hash ? 'approved' : 'quarantined';
}

/**
 * KEYS: pins, defs. ARGV: now, trust, then (tool, hash, definition JSON) for every tool the
 * upstream serves. Records new and changed hashes (under `auto` approving them), drops the
 * pins of tools it no longer serves and the definitions no pin names; returns the events as
 * a flat list of (tool, kind, hash).
 */
const RECORD = `
local now, trust = tonumber(ARGV[1]), ARGV[2]
local events, seen, bump = {}, {}, false
local function event(tool, kind, hash)
  events[#events + 1] = tool; events[#events + 1] = kind; events[#events + 1] = hash
end
for i = 3, #ARGV, 3 do
  local tool, hash, def = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local field = 't:' .. tool
  seen[field] = true
  redis.call('HSETNX', KEYS[2], hash, def)
  local raw = redis.call('HGET', KEYS[1], field)
  local e = raw and cjson.decode(raw)
  local write = false
  if not e then
    e = { current = hash, seenAt = now }
    event(tool, 'first_seen', hash)
    write = true
  elseif e.current ~= hash then
    e.current = hash
    e.changedAt = now
    event(tool, (trust ~= 'auto' and e.approved) and 'quarantined' or 'changed', hash)
    write = true
  end
  if trust == 'auto' and e.approved ~= hash then
    e.approved = hash; e.by = 'auto'; e.approvedAt = now
    event(tool, 'approved', hash)
    write = true
  end
  if write then
    redis.call('HSET', KEYS[1], field, cjson.encode(e))
    bump = true
  end
end
local keep = {}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local f = fields[i]
  if f ~= 'v' then
    local e = cjson.decode(fields[i + 1])
    if not seen[f] then
      redis.call('HDEL', KEYS[1], f)
      event(string.sub(f, 3), 'removed', e.current)
      bump = true
    else
      keep[e.current] = true
      if e.approved then keep[e.approved] = true end
    end
  end
end
for _, h in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not keep[h] then redis.call('HDEL', KEYS[2], h) end
end
if bump then redis.call('HINCRBY', KEYS[1], 'v', 1) end
return events
`;

/**
 * KEYS: pins. ARGV: tool, hash, by, now. Approves `hash` only if it is the tool's current
 * one: an admin never approves a definition that changed while they read it.
 */
const APPROVE = `
local raw = redis.call('HGET', KEYS[1], 't:' .. ARGV[1])
if not raw then return {'unknown'} end
local e = cjson.decode(raw)
if e.current ~= ARGV[2] then return {'conflict', e.current} end
if e.approved == ARGV[2] then return {'unchanged', raw} end
e.approved = ARGV[2]; e.by = ARGV[3]; e.approvedAt = tonumber(ARGV[4])
local text = cjson.encode(e)
redis.call('HSET', KEYS[1], 't:' .. ARGV[1], text)
redis.call('HINCRBY', KEYS[1], 'v', 1)
return {'approved', text}
`;

export class Pins {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /** Records the definitions `tools` an upstream serves now; returns what changed. */
  async record(
    id: string,
    trust: 'pin' | 'auto',
    tools: readonly { def: UpstreamToolDefinition; hash: string }[],
  ): Promise<PinEvent[]> {
    const { pins, defs } = this.keys.upstream(id);
    const args: string[] = [String(Date.now()), trust];
    for (const { def, hash } of tools) args.push(def.name, hash, JSON.stringify(def));
    const flat = (await this.redis.eval(RECORD, 2, pins, defs, ...args)) as string[];
    const events: PinEvent[] = [];
    for (let i = 0; i + 2 < flat.length; i += 3)
      events.push({ tool: flat[i]!, kind: flat[i + 1] as PinEvent['kind'], hash: flat[i + 2]! });
    return events;
  }

  /** Changes whenever a pin does: what every process polls. */
  async version(id: string): Promise<string> {
    return (await this.redis.hget(this.keys.upstream(id).pins, 'v')) ?? '0';
  }

  /** Every tool's pin (≤ CATALOG_LIMITS.maxTools small entries). */
  async entries(id: string): Promise<Map<string, PinEntry>> {
    const all = await this.redis.hgetall(this.keys.upstream(id).pins);
    const out = new Map<string, PinEntry>();
    for (const [field, text] of Object.entries(all)) {
      if (!field.startsWith('t:')) continue;
      try {
        out.set(field.slice(2), JSON.parse(text) as PinEntry);
      } catch {
        // A pin that does not parse approves nothing: the tool stays pending.
      }
    }
    return out;
  }

  /** The definitions of `hashes` (absent ones are left out). */
  async definitions(id: string, hashes: readonly string[]): Promise<Map<string, unknown>> {
    const out = new Map<string, unknown>();
    if (hashes.length === 0) return out;
    const texts = await this.redis.hmget(this.keys.upstream(id).defs, ...hashes);
    hashes.forEach((h, i) => {
      const text = texts[i];
      if (text) out.set(h, JSON.parse(text) as unknown);
    });
    return out;
  }

  async approve(id: string, tool: string, hash: string, by: string): Promise<ApproveResult> {
    const [kind, value] = (await this.redis.eval(
      APPROVE,
      1,
      this.keys.upstream(id).pins,
      tool,
      hash,
      by,
      String(Date.now()),
    )) as [string, string | undefined];
    if (kind === 'unknown') return { kind };
    if (kind === 'conflict') return { kind, current: value! };
    return {
      kind: kind as 'approved' | 'unchanged',
      entry: JSON.parse(value!) as PinEntry,
    };
  }
}
