import type { ChainableCommander, Redis } from 'ioredis';
import type { Keys } from './keys.js';
import { redact } from './redact.js';

export interface AuditEntry {
  at: string;
  /** call: a call ended; refused: the gateway turned it away; approval: an admin decided. */
  event: 'call' | 'refused' | 'approval';
  client: string;
  tool: string;
  status: string;
  callId?: string;
  durationMs?: number;
  /** Redacted. */
  args?: unknown;
  /** For approvals: the admin client that decided. */
  by?: string;
  reason?: string;
}

export interface AuditQuery {
  limit?: number;
  client?: string;
  tool?: string;
  event?: AuditEntry['event'];
}

/** Who called what, when, with what result: a capped Redis stream, newest first on read. */
export class AuditLog {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly maxEntries: number,
  ) {}

  entry(fields: Omit<AuditEntry, 'at' | 'args'> & { args?: unknown }): AuditEntry {
    const { args, ...rest } = fields;
    return {
      at: new Date().toISOString(),
      ...rest,
      ...(args === undefined ? {} : { args: redact(args) }),
    };
  }

  /** Adds to a MULTI/pipeline the caller is building (one round trip with the call's other writes). */
  addTo(multi: ChainableCommander, entry: AuditEntry): void {
    multi.xadd(this.keys.audit, 'MAXLEN', '~', this.maxEntries, '*', 'e', JSON.stringify(entry));
  }

  async append(entry: AuditEntry): Promise<void> {
    await this.redis.xadd(
      this.keys.audit,
      'MAXLEN',
      '~',
      this.maxEntries,
      '*',
      'e',
      JSON.stringify(entry),
    );
  }

  async recent(query: AuditQuery = {}): Promise<AuditEntry[]> {
    const limit = query.limit ?? 100;
    const out: AuditEntry[] = [];
    let end = '+';
    // Filters apply after reading, so page through until enough match or the stream ends.
    for (let page = 0; page < 20 && out.length < limit; page++) {
      const rows = await this.redis.xrevrange(this.keys.audit, end, '-', 'COUNT', 500);
      if (rows.length === 0) break;
      for (const [id, fields] of rows) {
        end = `(${id}`;
        const entry = JSON.parse(fields[1] ?? '{}') as AuditEntry;
        if (query.client && entry.client !== query.client) continue;
        if (query.tool && entry.tool !== query.tool) continue;
        if (query.event && entry.event !== query.event) continue;
        out.push(entry);
        if (out.length >= limit) break;
      }
      if (rows.length < 500) break;
    }
    return out;
  }
}
