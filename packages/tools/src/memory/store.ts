/**
 * Per-client memory in Redis, searched with MiniSearch. Redis holds the entries (one hash per
 * client plus a version counter); each process keeps a search index per client and rebuilds it
 * only when the client's version moved, so any number of workers share one store and the notes
 * survive restarts of every service.
 *
 * A search runs synchronously on a worker shared by every tenant, so its cost is bounded
 * whatever a client stored: a total size per client, a few query terms, and prefix / typo
 * matching only for terms that expand to a handful of indexed words (docs/policy-budgets.md).
 */
import { randomUUID } from 'node:crypto';
import { ToolError } from '@toolgate/registry';
import type { Cluster, Redis } from 'ioredis';

import MiniSearch, { type SearchOptions } from 'minisearch';
import SearchableMap from 'minisearch/SearchableMap';

/** A connection to one server, a Sentinel-managed master or a Redis Cluster. */
type RedisClient = Redis | Cluster;

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
  /** Bytes of all of one client's stored entries; saving past it fails with `memory_full`. */
  maxTotalBytes: number;
  /** Distinct words in a search query; more fails with `query_too_long`. */
  maxQueryTerms: number;
}

export const DEFAULT_MEMORY_LIMITS: MemoryLimits = {
  maxEntries: 1000,
  maxTextLength: 4000,
  maxTags: 10,
  maxTagLength: 40,
  // 256 KiB: an index this size builds in ~100 ms (in slices) and answers in a few ms.
  maxTotalBytes: 262_144,
  maxQueryTerms: 8,
};

/**
 * Where a client's memory lives: `Keys` from @toolgate/calls, which owns every key name
 * (passed in, so this package does not depend on the queue package).
 */
export interface MemoryKeys {
  memory(clientId: string): { entries: string; version: string };
}

/** Indexed words one query word may stand for by prefix or typo; beyond, it matches exactly. */
const MAX_EXPANSIONS = 16;
/** Entries indexed per slice when an index is built; the event loop runs between slices. */
const BUILD_CHUNK = 16;

export interface MemoryStoreOptions extends Partial<MemoryLimits> {
  keys: MemoryKeys;
  /** Clients whose index this process keeps in memory (least recently searched dropped). */
  cachedClients?: number;
}

type Index = MiniSearch<MemoryEntry>;

/**
 * One client's search index at a version, with what it holds: the entries (to apply another
 * process's saves and deletes as a difference) and every indexed word with the number of entries
 * containing it (to count what a prefix or a typo would expand to before MiniSearch expands it).
 */
interface CachedIndex {
  version: string;
  index: Index;
  entries: Map<string, MemoryEntry>;
  words: SearchableMap<number>;
}

/**
 * KEYS: entries hash, version. ARGV: id, json, maxEntries, maxTotalBytes.
 * → new count, -1 when full, -2 when the entries would pass maxTotalBytes.
 */
const SAVE = `
local n = redis.call('HLEN', KEYS[1])
if n >= tonumber(ARGV[3]) then return -1 end
local total = #ARGV[2]
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do total = total + #v end
if total > tonumber(ARGV[4]) then return -2 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return n + 1`;

/** KEYS: entries hash, version. ARGV: id. → 1 when removed. */
const DELETE = `
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
if removed == 1 then redis.call('INCR', KEYS[2]) end
return removed`;

const tokenize = MiniSearch.getDefault('tokenize') as (text: string) => string[];
const processTerm = MiniSearch.getDefault('processTerm') as (
  term: string,
) => string | string[] | null | undefined | false;

/** The distinct words MiniSearch indexes for a text (its default tokenizer and term processing). */
function wordsOf(text: string): Set<string> {
  const out = new Set<string>();
  for (const token of tokenize(text)) {
    const processed = processTerm(token);
    if (!processed) continue;
    for (const w of Array.isArray(processed) ? processed : [processed]) if (w) out.add(w);
  }
  return out;
}

const entryText = (e: MemoryEntry) => `${e.text} ${e.tags.join(' ')}`;

export class MemoryStore {
  readonly limits: MemoryLimits;
  private readonly keyNames: MemoryKeys;
  private readonly cachedClients: number;
  /** clientId → index at a version; Map order is recency of use. */
  private readonly indexes = new Map<string, CachedIndex>();

  /** The Redis a client's memory is on: one, or its shard's (docs/sharding.md). */
  private readonly redisOf: (clientId: string) => RedisClient;

  constructor(
    redis: RedisClient | ((clientId: string) => RedisClient),
    options: MemoryStoreOptions,
  ) {
    this.redisOf = typeof redis === 'function' ? redis : () => redis;
    this.keyNames = options.keys;
    this.cachedClients = options.cachedClients ?? 256;
    this.limits = {
      maxEntries: options.maxEntries ?? DEFAULT_MEMORY_LIMITS.maxEntries,
      maxTextLength: options.maxTextLength ?? DEFAULT_MEMORY_LIMITS.maxTextLength,
      maxTags: options.maxTags ?? DEFAULT_MEMORY_LIMITS.maxTags,
      maxTagLength: options.maxTagLength ?? DEFAULT_MEMORY_LIMITS.maxTagLength,
      maxTotalBytes: options.maxTotalBytes ?? DEFAULT_MEMORY_LIMITS.maxTotalBytes,
      maxQueryTerms: options.maxQueryTerms ?? DEFAULT_MEMORY_LIMITS.maxQueryTerms,
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
    const { maxEntries, maxTextLength, maxTags, maxTagLength, maxTotalBytes } = this.limits;
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
    const count = (await this.redisOf(clientId).eval(
      SAVE,
      2,
      ...this.keys(clientId),
      entry.id,
      JSON.stringify(entry),
      maxEntries,
      maxTotalBytes,
    )) as number;
    if (count === -2) {
      throw new ToolError(
        'memory_full',
        `this memory already holds its maximum of ${maxTotalBytes} bytes of notes; delete some with memory_delete or save a shorter note`,
        { details: { maxEntries, maxTotalBytes } },
      );
    }
    if (count < 0) {
      throw new ToolError(
        'memory_full',
        `this memory already holds its maximum of ${maxEntries} entries; delete some with memory_delete before saving more`,
        { details: { maxEntries, maxTotalBytes } },
      );
    }
    return { entry, count };
  }

  async search(clientId: string, query: string, limit = 5): Promise<MemoryMatch[]> {
    const terms = wordsOf(query);
    if (terms.size > this.limits.maxQueryTerms) {
      throw new ToolError(
        'query_too_long',
        `the query has ${terms.size} distinct words; search with at most ${this.limits.maxQueryTerms}`,
        { details: { terms: terms.size, maxQueryTerms: this.limits.maxQueryTerms } },
      );
    }
    if (terms.size === 0) return [];
    const { index, words } = await this.index(clientId);
    // MiniSearch scores every word a prefix or a typo expands to: a store full of "aaa…" words
    // makes "aaa" cost seconds. Expand only where it stands for a handful of indexed words.
    const few = (matches: Iterable<unknown>) => {
      let n = 0;
      for (const _ of matches) if (++n > MAX_EXPANSIONS) return false;
      return true;
    };
    const options: SearchOptions = {
      prefix: (term) => term.length >= 3 && few(words.atPrefix(term).keys()),
      // One edit from 4 letters; the typo search itself is bounded by the word's length.
      fuzzy: (term) => (term.length >= 4 && few(words.fuzzyGet(term, 1).keys()) ? 1 : false),
      maxFuzzy: 1,
      boost: { tagText: 2 },
      combineWith: 'OR',
    };
    return index
      .search([...terms].join(' '), options)
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
    return (
      ((await this.redisOf(clientId).eval(DELETE, 2, ...this.keys(clientId), id)) as number) === 1
    );
  }

  async count(clientId: string): Promise<number> {
    return this.redisOf(clientId).hlen(this.keys(clientId)[0]);
  }

  /** Forgets everything of one client (operators, tests). */
  async clear(clientId: string): Promise<void> {
    await this.redisOf(clientId).del(...this.keys(clientId));
    this.indexes.delete(clientId);
  }

  /**
   * The client's index, brought up to date when another save or delete moved its version: only
   * the entries added or removed since are read and applied. A first build indexes the entries
   * in slices, letting the event loop run between them.
   */
  private async index(clientId: string): Promise<CachedIndex> {
    const [entriesKey, versionKey] = this.keys(clientId);
    const version = (await this.redisOf(clientId).get(versionKey)) ?? '0';
    const cached = this.indexes.get(clientId);
    this.indexes.delete(clientId);
    if (cached && cached.version === version) {
      this.indexes.set(clientId, cached);
      return cached;
    }
    // Ids and version read together, so the index is labelled with the state it holds.
    const replies = await this.redisOf(clientId).multi().hkeys(entriesKey).get(versionKey).exec();
    const [idsReply, versionReply] = replies ?? [];
    if (!idsReply || !versionReply || idsReply[0] || versionReply[0]) {
      throw (idsReply?.[0] ?? versionReply?.[0] ?? new Error('memory read failed')) as Error;
    }
    const ids = new Set(idsReply[1] as string[]);
    const current = cached ?? {
      version: '0',
      index: new MiniSearch<MemoryEntry>({
        fields: ['text', 'tagText'],
        storeFields: ['text', 'tags', 'savedAt'],
        // Tags are an array: indexed as one text field, stored as they are.
        extractField: (doc, field) =>
          field === 'tagText' ? doc.tags.join(' ') : (doc[field as keyof MemoryEntry] as never),
      }),
      entries: new Map<string, MemoryEntry>(),
      words: new SearchableMap<number>(),
    };
    for (const [id, entry] of current.entries) {
      if (ids.has(id)) continue;
      current.index.discard(id);
      current.entries.delete(id);
      for (const w of wordsOf(entryText(entry))) {
        const n = (current.words.get(w) ?? 1) - 1;
        if (n > 0) current.words.set(w, n);
        else current.words.delete(w);
      }
    }
    const added = [...ids].filter((id) => !current.entries.has(id));
    // An entry deleted between the two reads comes back null: the next version skips it.
    const stored = added.length > 0 ? await this.redisOf(clientId).hmget(entriesKey, ...added) : [];
    const fresh = stored.flatMap((json) => (json ? [JSON.parse(json) as MemoryEntry] : []));
    for (const entry of fresh) {
      current.entries.set(entry.id, entry);
      for (const w of wordsOf(entryText(entry))) current.words.update(w, (n) => (n ?? 0) + 1);
    }
    if (fresh.length > BUILD_CHUNK) {
      await current.index.addAllAsync(fresh, { chunkSize: BUILD_CHUNK });
    } else {
      current.index.addAll(fresh);
    }
    current.version = (versionReply[1] as string | null) ?? '0';
    this.indexes.set(clientId, current);
    while (this.indexes.size > this.cachedClients) {
      this.indexes.delete(this.indexes.keys().next().value as string);
    }
    return current;
  }
}
