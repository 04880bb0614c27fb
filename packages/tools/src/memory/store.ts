/**
 * Per-client memory in Redis, searched with MiniSearch. Redis holds the entries (one hash per
 * client plus a version counter); each process keeps a search index per client and rebuilds it
 * only when the client's version moved, so any number of workers share one store and the notes
 * survive restarts of every service.
 */
import { randomUUID } from 'node:crypto';
import { ToolError } from '@toolgate/registry';
import type { Redis } from 'ioredis';
import MiniSearch, { type SearchOptions } from 'minisearch';

export interface MemoryEntry {
  id: string;
  text: string;
  tags: string[];
  /** ISO 8601, UTC. */
  savedAt: string;
}

export interface MemoryMatch extends MemoryEntry {
  /** Relevance (BM25 with fuzzy and prefix matches weighed down); higher is better. */
  score: number;
}

export interface MemoryLimits {
  /** Entries one client may keep; saving past it fails with `memory_full`. */
  maxEntries: number;
  /** Characters per entry; longer text fails with `text_too_long`. */
  maxTextLength: number;
  /** Tags per entry, and characters per tag. */
  maxTags: number;
  maxTagLength: number;
}

export const DEFAULT_MEMORY_LIMITS: MemoryLimits = {
  maxEntries: 1000,
  maxTextLength: 4000,
  maxTags: 10,
  maxTagLength: 40,
};

/**
 * Where a client's memory lives: `Keys` from @toolgate/calls, which owns every key name
 * (passed in, so this package does not depend on the queue package).
 */
export interface MemoryKeys {
  memory(clientId: string): { entries: string; version: string };
}

export interface MemoryStoreOptions extends Partial<MemoryLimits> {
  keys: MemoryKeys;
  /** Clients whose index this process keeps in memory (least recently searched dropped). */
  cachedClients?: number;
}

type Index = MiniSearch<MemoryEntry>;

/** KEYS: entries hash, version. ARGV: id, json, maxEntries. → new count, or -1 when full. */
const SAVE = `
local n = redis.call('HLEN', KEYS[1])
if n >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return n + 1`;

/** KEYS: entries hash, version. ARGV: id. → 1 when removed. */
const DELETE = `
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
if removed == 1 then redis.call('INCR', KEYS[2]) end
return removed`;

// Typos: one edit in words of 4–7 letters, two from 8 on; short words must match exactly.
const SEARCH: SearchOptions = {
  prefix: (term) => term.length >= 3,
  fuzzy: (term) => (term.length >= 8 ? 2 : term.length >= 4 ? 1 : false),
  boost: { tagText: 2 },
  combineWith: 'OR',
};

export class MemoryStore {
  readonly limits: MemoryLimits;
  private readonly keyNames: MemoryKeys;
  private readonly cachedClients: number;
  /** clientId → index at a version; Map order is recency of use. */
  private readonly indexes = new Map<string, { version: string; index: Index }>();

  constructor(
    private readonly redis: Redis,
    options: MemoryStoreOptions,
  ) {
    this.keyNames = options.keys;
    this.cachedClients = options.cachedClients ?? 256;
    this.limits = {
      maxEntries: options.maxEntries ?? DEFAULT_MEMORY_LIMITS.maxEntries,
      maxTextLength: options.maxTextLength ?? DEFAULT_MEMORY_LIMITS.maxTextLength,
      maxTags: options.maxTags ?? DEFAULT_MEMORY_LIMITS.maxTags,
      maxTagLength: options.maxTagLength ?? DEFAULT_MEMORY_LIMITS.maxTagLength,
    };
  }

  private keys(clientId: string): [entries: string, version: string] {
    const { entries, version } = this.keyNames.memory(clientId);
    return [entries, version];
  }

  async save(
    clientId: string,
    text: string,
    tags: readonly string[] = [],
  ): Promise<{ entry: MemoryEntry; count: number }> {
    const trimmed = text.trim();
    if (!trimmed) throw new ToolError('invalid_text', 'the text to remember is empty');
    const { maxEntries, maxTextLength, maxTags, maxTagLength } = this.limits;
    if (trimmed.length > maxTextLength) {
      throw new ToolError(
        'text_too_long',
        `the text has ${trimmed.length} characters; one memory holds at most ${maxTextLength} — save a shorter summary or split it`,
        { details: { length: trimmed.length, maxTextLength } },
      );
    }
    const cleanTags = [...new Set(tags.map((t) => t.trim()).filter(Boolean))];
    if (cleanTags.length > maxTags) {
      throw new ToolError('too_many_tags', `at most ${maxTags} tags per memory`);
    }
    const long = cleanTags.find((t) => t.length > maxTagLength);
    if (long !== undefined) {
      throw new ToolError('tag_too_long', `tags are at most ${maxTagLength} characters`);
    }
    const entry: MemoryEntry = {
      id: randomUUID(),
      text: trimmed,
      tags: cleanTags,
      savedAt: new Date().toISOString(),
    };
    const count = (await this.redis.eval(
      SAVE,
      2,
      ...this.keys(clientId),
      entry.id,
      JSON.stringify(entry),
      maxEntries,
    )) as number;
    if (count < 0) {
      throw new ToolError(
        'memory_full',
        `this memory already holds its maximum of ${maxEntries} entries; delete some with memory_delete before saving more`,
        { details: { maxEntries } },
      );
    }
    return { entry, count };
  }

  async search(clientId: string, query: string, limit = 5): Promise<MemoryMatch[]> {
    const index = await this.index(clientId);
    return index
      .search(query, SEARCH)
      .slice(0, limit)
      .map((hit) => ({
        id: hit.id as string,
        text: hit.text as string,
        tags: hit.tags as string[],
        savedAt: hit.savedAt as string,
        score: Math.round(hit.score * 1000) / 1000,
      }));
  }

  async delete(clientId: string, id: string): Promise<boolean> {
    return ((await this.redis.eval(DELETE, 2, ...this.keys(clientId), id)) as number) === 1;
  }

  async count(clientId: string): Promise<number> {
    return this.redis.hlen(this.keys(clientId)[0]);
  }

  /** Forgets everything of one client (operators, tests). */
  async clear(clientId: string): Promise<void> {
    await this.redis.del(...this.keys(clientId));
    this.indexes.delete(clientId);
  }

  /** The client's index, rebuilt from Redis when another save or delete moved its version. */
  private async index(clientId: string): Promise<Index> {
    const [entriesKey, versionKey] = this.keys(clientId);
    const version = (await this.redis.get(versionKey)) ?? '0';
    const cached = this.indexes.get(clientId);
    if (cached && cached.version === version) {
      this.indexes.delete(clientId);
      this.indexes.set(clientId, cached);
      return cached.index;
    }
    // Entries and version read together, so the index is labelled with the state it holds.
    const replies = await this.redis.multi().hgetall(entriesKey).get(versionKey).exec();
    const [entriesReply, versionReply] = replies ?? [];
    if (!entriesReply || !versionReply || entriesReply[0] || versionReply[0]) {
      throw (entriesReply?.[0] ?? versionReply?.[0] ?? new Error('memory read failed')) as Error;
    }
    const stored = entriesReply[1] as Record<string, string>;
    const index: Index = new MiniSearch<MemoryEntry>({
      fields: ['text', 'tagText'],
      storeFields: ['text', 'tags', 'savedAt'],
      // Tags are an array: indexed as one text field, stored as they are.
      extractField: (doc, field) =>
        field === 'tagText' ? doc.tags.join(' ') : (doc[field as keyof MemoryEntry] as never),
    });
    index.addAll(Object.values(stored).map((json) => JSON.parse(json) as MemoryEntry));
    this.indexes.set(clientId, { version: (versionReply[1] as string | null) ?? '0', index });
    while (this.indexes.size > this.cachedClients) {
      this.indexes.delete(this.indexes.keys().next().value as string);
    }
    return index;
  }
}
