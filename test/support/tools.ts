import { setTimeout as sleep } from 'node:timers/promises';
import { Type, ToolError, defineTool } from '@toolgate/registry';

/** A long call with live output (ctx.events): a line every `ms`, `n` times. */
export const ticker = defineTool({
  name: 'ticker',
  description: 'Prints n ticks, one every ms milliseconds',
  category: 'test',
  parameters: Type.Object({
    n: Type.Integer({ maximum: 1000 }),
    ms: Type.Integer({ maximum: 5000 }),
  }),
  handler: async ({ n, ms }, ctx) => {
    for (let i = 1; i <= n; i++) {
      ctx.events?.output('stdout', `tick ${i}\n`);
      await sleep(ms, undefined, { signal: ctx.signal });
    }
    return { ticks: n };
  },
});

/** Tools the integration tests register next to the built-ins. */
export const counter = { runs: 0 };

export const testTools = [
  defineTool({
    name: 'wipe_disk',
    description: 'A destructive tool: needs approval',
    category: 'test',
    risk: 'destructive',
    parameters: Type.Object({ disk: Type.String(), token: Type.Optional(Type.String()) }),
    handler: ({ disk }) => `wiped ${disk}`,
  }),
  defineTool({
    name: 'lookup',
    description: 'A cacheable lookup that counts its runs',
    category: 'test',
    cacheTtlSeconds: 1,
    parameters: Type.Object({ q: Type.String(), page: Type.Optional(Type.Integer()) }),
    handler: ({ q }) => ({ q, run: ++counter.runs }),
  }),
  defineTool({
    name: 'count_runs',
    description: 'Counts how many times it ran (for idempotency tests)',
    category: 'test',
    parameters: Type.Object({ label: Type.Optional(Type.String()) }),
    handler: () => ++counter.runs,
  }),
  defineTool({
    name: 'explode',
    description: 'Always throws',
    category: 'test',
    parameters: Type.Object({
      how: Type.Union([Type.Literal('error'), Type.Literal('tool_error'), Type.Literal('string')]),
    }),
    handler: ({ how }) => {
      if (how === 'tool_error')
        throw new ToolError('upstream_down', 'the upstream service is down', {
          details: { retryInSeconds: 5 },
        });
      if (how === 'string') throw 'a bare string';
      throw new Error('kaboom');
    },
  }),
  defineTool({
    name: 'sleep',
    description: 'Sleeps for ms milliseconds, then answers',
    category: 'test',
    parameters: Type.Object({ ms: Type.Integer({ minimum: 0, maximum: 60_000 }) }),
    timeoutMs: 2000,
    handler: async ({ ms }, ctx) => {
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(resolve, ms);
        ctx.signal.addEventListener('abort', () => {
          clearTimeout(t);
          reject(new Error('aborted'));
        });
      });
      return { slept: ms };
    },
  }),
];
