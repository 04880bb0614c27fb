// text_stats: counts in a text, computed in-process. The simplest kind of plugin: a plain
// object with no setup function and no imports.

const WORDS_PER_MINUTE = 230;

export default {
  name: 'text_stats',
  tools: [
    {
      name: 'text_stats',
      description:
        'Count the characters, words, sentences, lines and paragraphs of a text, with an ' +
        'estimated reading time in minutes.',
      category: 'text',
      parameters: {
        type: 'object',
        properties: {
          text: { type: 'string', maxLength: 1_000_000, description: 'The text to measure' },
        },
        required: ['text'],
      },
      // What the handler returns, as JSON Schema: MCP clients get it as the tool's
      // outputSchema, and the worker counts results that do not match it.
      result: {
        type: 'object',
        properties: {
          characters: { type: 'integer', minimum: 0 },
          words: { type: 'integer', minimum: 0 },
          sentences: { type: 'integer', minimum: 0 },
          lines: { type: 'integer', minimum: 0 },
          paragraphs: { type: 'integer', minimum: 0 },
          readingMinutes: { type: 'number', minimum: 0 },
        },
        required: ['characters', 'words', 'sentences', 'lines', 'paragraphs', 'readingMinutes'],
        additionalProperties: false,
      },
      timeoutMs: 2000,
      cacheTtlSeconds: 300,
      idempotent: true,
      handler: ({ text }) => {
        const words = text.match(/[\p{L}\p{N}]+(?:['’-][\p{L}\p{N}]+)*/gu) ?? [];
        const sentences = text.split(/[.!?]+(?:\s|$)/u).filter((s) => /[\p{L}\p{N}]/u.test(s));
        return {
          characters: [...text].length,
          words: words.length,
          sentences: sentences.length,
          lines: text === '' ? 0 : text.split(/\r\n|\r|\n/).length,
          paragraphs: text.split(/(?:\r?\n\s*){2,}/).filter((p) => p.trim()).length,
          readingMinutes: Math.round((words.length / WORDS_PER_MINUTE) * 10) / 10,
        };
      },
    },
  ],
};
