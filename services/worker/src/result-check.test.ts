import { createLogger } from '@toolgate/log';
import { ToolRegistry, type AnyToolSpec, type Tool } from '@toolgate/registry';
import { describe, expect, it } from 'vitest';
import { createMetrics } from './metrics.js';
import { createResultChecker } from './result-check.js';
import { runTool } from './run-tool.js';

/** A tool as a JavaScript plugin writes it: plain JSON Schema, no compile-time check. */
const counter: AnyToolSpec = {
  name: 'count_things',
  description: 'Counts things',
  category: 'test',
  parameters: { type: 'object', properties: { lie: { type: 'boolean' } } } as never,
  result: {
    type: 'object',
    properties: { count: { type: 'integer' } },
    required: ['count'],
    additionalProperties: false,
  } as never,
  handler: (args: { lie?: boolean }) => (args.lie ? { count: 'many', extra: true } : { count: 3 }),
};
const untyped: AnyToolSpec = {
  name: 'anything_goes',
  description: 'Returns a string',
  category: 'test',
  parameters: { type: 'object', properties: {} } as never,
  handler: () => 'a string',
};

function setup() {
  const registry = new ToolRegistry();
  registry.registerAll([counter, untyped]);
  const metrics = createMetrics();
  const lines: Record<string, unknown>[] = [];
  // Every log call as { level, msg, ...fields }, kept here instead of written out.
  const logger = createLogger('test', {
    hooks: {
      logMethod(args, _method, level) {
        const [fields, msg] = args as unknown as [Record<string, unknown>, string];
        lines.push({ level, msg, ...fields });
      },
    },
  });
  const check = createResultChecker(registry, metrics, logger.child({ component: 'worker' }));
  let n = 0;
  const call = (name: string, args: Record<string, unknown> = {}) =>
    runTool(
      registry.get(name) as Tool,
      { id: `c${++n}`, tool: name, args, clientId: 'alice', acceptedAt: Date.now() },
      {} as never,
      new AbortController().signal,
      { checkResult: check },
    );
  const mismatches = async () =>
    (await metrics.resultMismatches.get()).values.map((v) => [v.labels.tool, v.value]);
  return { call, lines, mismatches };
}

describe('the worker checks results against their schema at run time', () => {
  it('a result that breaks its schema is still returned as it is, counted and logged', async () => {
    const { call, lines, mismatches } = setup();
    const outcome = await call('count_things', { lie: true });
    expect(outcome).toMatchObject({ status: 'ok', result: { count: 'many', extra: true } });
    expect(await mismatches()).toEqual([['count_things', 1]]);
    expect(lines).toEqual([
      expect.objectContaining({
        level: 40,
        msg: 'tool result does not match its result schema (returned as it is)',
        tool: 'count_things',
        callId: 'c1',
        issue: expect.objectContaining({ path: '/', keyword: 'additionalProperties' }),
      }),
    ]);
  });

  it('counts every mismatch but logs one per tool a minute', async () => {
    const { call, lines, mismatches } = setup();
    for (let i = 0; i < 5; i++) await call('count_things', { lie: true });
    expect(await mismatches()).toEqual([['count_things', 5]]);
    expect(lines).toHaveLength(1);
  });

  it('a fitting result, or a tool without a result schema, is neither counted nor logged', async () => {
    const { call, lines, mismatches } = setup();
    expect(await call('count_things')).toMatchObject({ status: 'ok', result: { count: 3 } });
    expect(await call('anything_goes')).toMatchObject({ status: 'ok', result: 'a string' });
    expect(await mismatches()).toEqual([]);
    expect(lines).toEqual([]);
  });
});
