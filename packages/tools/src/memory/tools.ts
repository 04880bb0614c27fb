/**
 * memory_save, memory_search, memory_delete (docs/spec.md §4): a per-client notebook the model writes
 * to and searches later, in any conversation. Each client sees only its own entries.
 */
import { Type, ToolError, defineTool, spaceOf, type ToolContext } from '@toolgate/registry';
import { DEFAULT_MEMORY_LIMITS, type MemoryStore } from './store.js';

declare module '@toolgate/registry' {
  interface ToolServices {
    /** Set by the worker (createMemoryStore); without it the memory tools fail with `unavailable`. */
    memory?: MemoryStore;
  }
}

function memoryOf(ctx: ToolContext): MemoryStore {
  const store = ctx.services.memory;
  if (!store) throw new ToolError('unavailable', 'memory is not configured on this worker');
  return store;
}

export const MAX_SEARCH_RESULTS = 50;

const savedAt = Type.String({ format: 'date-time', description: 'When it was saved (UTC)' });

export const MemorySaveResult = Type.Object(
  {
    id: Type.String({ description: 'Its id, for memory_delete' }),
    savedAt,
    entries: Type.Integer({ minimum: 1, description: 'Memories you now keep' }),
  },
  { additionalProperties: false },
);

export const MemorySearchResult = Type.Object(
  {
    results: Type.Array(
      Type.Object(
        {
          id: Type.String(),
          text: Type.String(),
          tags: Type.Array(Type.String()),
          savedAt,
          score: Type.Number({ description: 'Relevance, higher is better' }),
        },
        { additionalProperties: false },
      ),
      { maxItems: MAX_SEARCH_RESULTS, description: 'Best match first; empty when none matched' },
    ),
  },
  { additionalProperties: false },
);

export const MemoryDeleteResult = Type.Object(
  { deleted: Type.String({ description: 'The id of the memory forgotten' }) },
  { additionalProperties: false },
);

export const memorySave = defineTool({
  name: 'memory_save',
  description:
    'Remember a fact, preference or note for later conversations (private to you). ' +
    'Write it so it makes sense on its own; tags help find it again. Returns its id.',
  category: 'memory',
  parameters: Type.Object({
    text: Type.String({
      minLength: 1,
      maxLength: DEFAULT_MEMORY_LIMITS.maxTextLength,
      description: 'What to remember, self-contained',
    }),
    tags: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: DEFAULT_MEMORY_LIMITS.maxTagLength }), {
        maxItems: DEFAULT_MEMORY_LIMITS.maxTags,
        description: 'Keywords such as "project-x" or "preferences"',
      }),
    ),
  }),
  result: MemorySaveResult,
  risk: 'sensitive',
  timeoutMs: 5000,
  handler: async ({ text, tags }, ctx) => {
    const { entry, count } = await memoryOf(ctx).save(spaceOf(ctx), text, tags ?? []);
    return { id: entry.id, savedAt: entry.savedAt, entries: count };
  },
});

export const memorySearch = defineTool({
  name: 'memory_search',
  description:
    'Search what you saved with memory_save: ranked by relevance, tolerant of typos and ' +
    'partial words. Returns the best matches with their id, text, tags and savedAt.',
  category: 'memory',
  parameters: Type.Object({
    query: Type.String({ minLength: 1, maxLength: 1000, description: 'Words to look for' }),
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_SEARCH_RESULTS,
        description: 'Most results to return (default 5)',
      }),
    ),
  }),
  result: MemorySearchResult,
  timeoutMs: 5000,
  idempotent: true,
  handler: async ({ query, limit }, ctx) => ({
    results: await memoryOf(ctx).search(spaceOf(ctx), query, limit ?? 5),
  }),
});

export const memoryDelete = defineTool({
  name: 'memory_delete',
  description: 'Forget one memory by the id memory_save or memory_search gave.',
  category: 'memory',
  parameters: Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }),
  result: MemoryDeleteResult,
  risk: 'sensitive',
  timeoutMs: 5000,
  idempotent: true,
  handler: async ({ id }, ctx) => {
    if (!(await memoryOf(ctx).delete(spaceOf(ctx), id))) {
      throw new ToolError('not_found', `no memory with id "${id}"`);
    }
    return { deleted: id };
  },
});
