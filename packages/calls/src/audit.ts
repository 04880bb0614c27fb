import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';
import type { Keys } from './keys.js';
import { maskText, redact } from './redact.js';
import { Upkeep } from './upkeep.js';

export interface AuditEntry {
  at: string;
  /**
   * call: a call ended; refused: the gateway turned it away; approval: an admin decided;
   * upstream: an upstream tool's definition was first seen, changed, quarantined, approved or
   * removed (`client` is `upstream:<id>`, `hash` the definition's); secret: an admin set or
   * deleted a secret (`secret` its name, never its value; `tool` is empty); session: an admin
   * ended a session (`tool` its tool); workspace: an admin reset a workspace (`tool` is empty).
   */
  event:
    'call' | 'refused' | 'approval' | 'cancel' | 'upstream' | 'secret' | 'session' | 'workspace';
  client: string;
  /**
   * The user the client acted for (an OAuth token's user claim), when known; for secret events
   * on a user's secret, that user.
   */
  user?: string;
  tool: string;
  status: string;
  callId?: string;
  /** A nested call of a code-mode script: the script's call. */
  parentCallId?: string;
  durationMs?: number;
  /** Redacted; when the entry was over the size cap, a cut JSON text of the redacted args. */
  args?: unknown;
  /**
   * Who decided (approvals, cancels, secrets, upstream approvals, session ends, workspace
   * resets): the client, and `:<user>` when it acted through a user's token.
   */
  by?: string;
  reason?: string;
  /** For secret events: the secret's name. */
  secret?: string;
  /** For upstream events: the sha256 of the tool's definition (canonical JSON). */
  hash?: string;
  /** The Cedar policies' decision and the deciding policies' ids, with `policy.cedar`. */
  policy?: { decision: string; policies: string[] };
  /** The entry was over `audit.maxEntryBytes` and was cut to fit. */
  truncated?: true;
}

export interface AuditQuery {
  limit?: number;
  client?: string;
  tool?: string;
  event?: AuditEntry['event'];
  /** Only this call's entries (its run, refusal, decisions, cancel). */
  callId?: string;
}

/** One answer of `AuditLog.recent`. */
export interface AuditPage {
  entries: AuditEntry[];
  /**
   * The scan stopped at its budget (MAX_SCANNED entries or MAX_SCANNED_BYTES) with fewer than
   * `limit` matches and entries left unread: older matches may exist.
   */
  partial: boolean;
}

export interface AuditLimits {
  /** Entries kept in each client's stream (approximately: RedisClient trims whole nodes). */
  maxEntriesPerClient: number;
  /** Hard cap on one serialized entry, keys and values together, in bytes. */
  maxEntryBytes: number;
}

/** Rows read per stream per round trip when merging, and rows looked at per query at most. */
const PAGE = 200;
/** How often a process adds a client to the set of clients with an audit stream again. */
const LIST_EVERY_MS = 60_000;
/** Bytes of entries read per stream per round trip: fewer rows when entries may be large. */
const PAGE_BYTES = 256 * 1024;
/** Bytes of entries one query reads at most, whatever its filters match (with MAX_SCANNED). */
export const MAX_SCANNED_BYTES = 8 * 1024 * 1024;
/** Characters of a reason kept (and scanned for secrets). */
const MAX_REASON = 1000;
const MAX_SCANNED = 10_000;

/**
 * Who called what, when, with what result: one capped Redis stream per client
 * (`Keys.audit(client)`), so a client flooding refusals only pushes out its own history. Reads
 * merge the streams newest first by stream id (Redis's clock, so one order across writers).
 */
export class AuditLog {
  private readonly listed = new Upkeep(LIST_EVERY_MS);

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly limits: AuditLimits,
  ) {}

  entry(fields: Omit<AuditEntry, 'at' | 'args'> & { args?: unknown }): AuditEntry {
    const { args, reason, ...rest } = fields;
    return {
      at: new Date().toISOString(),
      ...rest,
      ...(args === undefined ? {} : { args: redact(args) }),
      // Error messages can quote what the client sent: masked like any text, and cut.
      ...(reason === undefined ? {} : { reason: maskText(cut(reason, MAX_REASON)!) }),
    };
  }

  /** Adds to a MULTI/pipeline the caller is building (one round trip with the call's other writes). */
  addTo(multi: ChainableCommander, entry: AuditEntry): void {
    multi.xadd(
      this.keys.audit(entry.client),
      'MAXLEN',
      '~',
      this.limits.maxEntriesPerClient,
      '*',
      'e',
      this.serialize(entry),
    );
    if (this.listed.due(entry.client)) multi.sadd(this.keys.auditClients, entry.client);
  }

  async append(entry: AuditEntry): Promise<void> {
    const pipeline = this.redis.pipeline();
    this.addTo(pipeline, entry);
    const failed = ((await pipeline.exec()) ?? []).find(([err]) => err);
    if (failed) throw failed[0];
  }

  /** The entry as stored: its JSON, or a cut copy marked `truncated` when over the byte cap. */
  serialize(entry: AuditEntry): string {
    const json = JSON.stringify(entry);
    const max = this.limits.maxEntryBytes;
    // A UTF-16 unit is at most 3 bytes of UTF-8: most entries skip the byte count.
    if (json.length * 3 <= max || Buffer.byteLength(json) <= max) return json;
    return truncate(entry, max);
  }

  async recent(query: AuditQuery = {}): Promise<AuditPage> {
    const limit = query.limit ?? 100;
    const clients = query.client
      ? [query.client]
      : await this.redis.smembers(this.keys.auditClients);
    const cursors: Cursor[] = clients.map((c) => ({
      key: this.keys.audit(c),
      rows: [],
      next: 0,
      end: '+',
      more: true,
    }));
    const out: AuditEntry[] = [];
    // Filters apply after reading: merge until enough match, the streams end, or the scan caps.
    const read = { bytes: 0 };
    for (
      let scanned = 0;
      out.length < limit && scanned < MAX_SCANNED && read.bytes < MAX_SCANNED_BYTES;
      scanned++
    ) {
      await this.refill(cursors, read);
      let newest: Cursor | undefined;
      for (const c of cursors) {
        if (
          c.next < c.rows.length &&
          (!newest || newer(c.rows[c.next]![0], newest.rows[newest.next]![0]))
        )
          newest = c;
      }
      if (!newest) break;
      const [, fields] = newest.rows[newest.next++]!;
      const entry = JSON.parse(fields[1] ?? '{}') as AuditEntry;
      if (query.client && entry.client !== query.client) continue;
      if (query.tool && entry.tool !== query.tool) continue;
      if (query.event && entry.event !== query.event) continue;
      if (query.callId && entry.callId !== query.callId) continue;
      out.push(entry);
    }
    const unread = cursors.some((c) => c.more || c.next < c.rows.length);
    return { entries: out, partial: out.length < limit && unread };
  }

  /** Reads the next page of every stream whose rows ran out, in one round trip. */
  private async refill(cursors: Cursor[], read: { bytes: number }): Promise<void> {
    const empty = cursors.filter((c) => c.more && c.next >= c.rows.length);
    if (empty.length === 0) return;
    const page = Math.min(PAGE, Math.max(8, Math.floor(PAGE_BYTES / this.limits.maxEntryBytes)));
    const pipeline = this.redis.pipeline();
    for (const c of empty) pipeline.xrevrange(c.key, c.end, '-', 'COUNT', page);
    const results = (await pipeline.exec()) ?? [];
    empty.forEach((c, i) => {
      const [err, rows] = results[i] ?? [new Error('no reply')];
      if (err) throw err;
      c.rows = rows as [string, string[]][];
      c.next = 0;
      c.more = c.rows.length === page;
      // Bytes, not string length: an entry of 3-byte characters would count a third.
      for (const [, fields] of c.rows) read.bytes += Buffer.byteLength(fields[1] ?? '');
      if (c.rows.length > 0) c.end = `(${c.rows.at(-1)![0]}`;
    });
  }
}

interface Cursor {
  key: string;
  rows: [string, string[]][];
  next: number;
  /** Exclusive upper bound for the next page. */
  end: string;
  /** False once a page came back short. */
  more: boolean;
}

/** Stream ids are `<ms>-<seq>`; compare as numbers, not text ("10-0" > "9-0"). */
function newer(a: string, b: string): boolean {
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am !== bm ? am > bm : as > bs;
}

function cut(text: string | undefined, chars: number): string | undefined {
  if (text === undefined) return undefined;
  return text.length > chars ? `${text.slice(0, chars)}…` : text;
}

/**
 * A copy of an oversized entry that fits in `max` bytes: the short fields cut to fixed
 * lengths, the arguments kept as a cut JSON text in the room left, `truncated: true`.
 */
function truncate(entry: AuditEntry, max: number): string {
  const head: AuditEntry = {
    at: entry.at,
    event: entry.event,
    client: cut(entry.client, 64)!,
    tool: cut(entry.tool, 128)!,
    status: cut(entry.status, 64)!,
    ...(entry.callId === undefined ? {} : { callId: cut(entry.callId, 64)! }),
    ...(entry.durationMs === undefined ? {} : { durationMs: entry.durationMs }),
    // A client id (64) and a user (256): the person who decided is never cut away.
    ...(entry.by === undefined ? {} : { by: cut(entry.by, 330)! }),
    ...(entry.user === undefined ? {} : { user: cut(entry.user, 256)! }),
    ...(entry.hash === undefined ? {} : { hash: cut(entry.hash, 64)! }),
    ...(entry.reason === undefined ? {} : { reason: cut(entry.reason, 256)! }),
    truncated: true,
  };
  let json = JSON.stringify(head);
  const room = max - Buffer.byteLength(json) - ',"args":'.length;
  const text = entry.args === undefined ? undefined : JSON.stringify(entry.args);
  if (text !== undefined && room > 16) {
    // JSON escaping and multi-byte characters make bytes ≠ characters: shrink until it fits.
    let chars = room;
    for (let i = 0; i < 8 && chars > 0; i++) {
      const candidate = JSON.stringify({ ...head, args: `${text.slice(0, chars)}…` });
      const bytes = Buffer.byteLength(candidate);
      if (bytes <= max) return candidate;
      chars = Math.floor((chars * max) / bytes) - 8;
    }
  }
  if (Buffer.byteLength(json) > max) {
    // Only a pathological mix of multi-byte text in every field gets here.
    json = JSON.stringify({
      at: head.at,
      event: head.event,
      client: head.client,
      tool: cut(head.tool, 16),
      status: cut(head.status, 16),
      truncated: true,
    });
  }
  return json;
}
