/** find_tools (docs/spec.md §4): lets a model with a short tool list discover the rest by need. */
import { Type, ToolError, defineTool } from '@toolgate/registry';
import type { ToolCatalog } from './catalog.js';

declare module '@toolgate/registry' {
  interface ToolServices {
    /** Set by the worker (createToolCatalog); without it find_tools fails with `unavailable`. */
    toolCatalog?: ToolCatalog;
  }
}

export const MAX_FIND_RESULTS = 25;

export const FindToolsResult = Type.Object(
  {
    tools: Type.Array(
      Type.Object(
        {
          name: Type.String(),
          description: Type.String(),
          category: Type.String(),
          // The registry holds parameters as plain JSON (Record<string, unknown>) and admits only
          // object schemas: say so in JSON Schema without narrowing the static type.
          parameters: Type.Unsafe<Record<string, unknown>>({
            type: 'object',
            properties: { type: { const: 'object' } },
            required: ['type'],
            additionalProperties: true,
            description: 'JSON Schema of the arguments',
          }),
        },
        { additionalProperties: false },
      ),
      { maxItems: MAX_FIND_RESULTS, description: 'Best match first; empty when none matched' },
    ),
  },
  { additionalProperties: false },
);

export const findTools = defineTool({
  name: 'find_tools',
  description:
    'Search the tools you can use by what you need to do, e.g. "read a csv file" or "weather". ' +
    'Returns the best matching tools with their descriptions and parameters; call them by name.',
  category: 'meta',
  parameters: Type.Object({
    query: Type.String({ minLength: 1, maxLength: 500, description: 'What the tool should do' }),
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_FIND_RESULTS,
        description: 'Most tools to return (default 5)',
      }),
    ),
  }),
  result: FindToolsResult,
  timeoutMs: 2000,
  idempotent: true,
  handler: ({ query, limit }, ctx) => {
    const catalog = ctx.services.toolCatalog;
    if (!catalog) throw new ToolError('unavailable', 'find_tools is not configured on this worker');
    return { tools: catalog.search(ctx.clientId, query, limit ?? 5) };
  },
});
