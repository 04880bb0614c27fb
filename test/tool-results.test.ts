/**
 * Result schemas of plugin tools, as the services load them: a plugin declaring a result that
 * is not a JSON Schema is skipped with a reason; one whose handler breaks its declared result still
 * answers the caller with what it returned, and the worker counts the mismatch.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadPlugins, type LoadResult } from '@toolgate/plugins';
import { ToolRegistry } from '@toolgate/registry';
import { createToolRegistry } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from './support/process.js';
import { startStack, type Stack } from './support/stack.js';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

const LIAR = `
export default ({ Type }) => ({
  name: 'liar',
  tools: [{
    name: 'count_words',
    description: 'Counts the words of a text',
    category: 'text',
    parameters: Type.Object({ text: Type.String(), lie: Type.Optional(Type.Boolean()) }),
    result: Type.Object({ words: Type.Integer() }, { additionalProperties: false }),
    handler: ({ text, lie }) =>
      lie ? { words: String(text.split(/\\s+/).length) } : { words: text.split(/\\s+/).length },
  }],
});
`;

const NOT_A_SCHEMA = `
export default ({ Type }) => ({
  name: 'not_a_schema',
  tools: [{
    name: 'word_list',
    description: 'The words of a text',
    category: 'text',
    parameters: Type.Object({ text: Type.String() }),
    result: 'a list of words',
    handler: ({ text }) => text.split(/\\s+/),
  }],
});
`;

let dir: string;
let plugins: LoadResult;
let stack: Stack;
let metricsPort: number | undefined;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'tg-result-plugins-'));
  for (const [name, source] of [
    ['liar', LIAR],
    ['not_a_schema', NOT_A_SCHEMA],
  ] as const) {
    await mkdir(path.join(dir, name));
    await writeFile(path.join(dir, name, 'plugin.mjs'), source);
  }
  plugins = await loadPlugins([dir], quiet, {
    reserved: createToolRegistry()
      .list()
      .map((t) => t.name),
  });
  stack = await startStack({ tools: plugins.tools });
  metricsPort = await stack.worker!.serveMetrics(0);
});

afterAll(async () => {
  await stack?.close();
  await rm(dir, { recursive: true, force: true });
});

const execute = async (tool: string, args: unknown) => {
  const res = await stack.call(`/tools/${tool}/execute`, { json: args });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
};

const mismatches = async (tool: string): Promise<number> => {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const line = text
    .split('\n')
    .find(
      (l) => l.startsWith('toolgate_tool_result_mismatches_total{') && l.includes(`tool="${tool}"`),
    );
  return line ? Number(line.split(' ').pop()) : 0;
};

describe('plugin result schemas', () => {
  it('a plugin whose result schema is no JSON Schema is skipped, saying why', () => {
    expect(plugins.tools.map((t) => t.name)).toEqual(['count_words']);
    expect(plugins.failed).toEqual([
      {
        dir: path.join(dir, 'not_a_schema'),
        error: expect.stringContaining('tool "word_list": result must be a JSON Schema object'),
      },
    ]);
  });

  it('a result that fits is returned and not counted', async () => {
    expect(await execute('count_words', { text: 'one two three' })).toMatchObject({
      status: 'ok',
      result: { words: 3 },
    });
    expect(await mismatches('count_words')).toBe(0);
  });

  it('a result that breaks the schema still answers the call as returned, and is counted', async () => {
    expect(await execute('count_words', { text: 'one two', lie: true })).toMatchObject({
      status: 'ok',
      result: { words: '2' },
    });
    expect(await mismatches('count_words')).toBe(1);
  });
});

describe('the example plugins', () => {
  it('text_stats declares its result, and what it returns fits it', async () => {
    const examples = await loadPlugins([path.join(ROOT, 'plugins/examples')], quiet, {
      env: { STOCK_QUOTE_TOKEN: 'unused' },
    });
    const registry = new ToolRegistry();
    registry.registerAll(examples.tools);
    const textStats = registry.get('text_stats')!;
    expect(textStats.result).toMatchObject({ type: 'object', additionalProperties: false });
    for (const text of ['', 'One line.', 'Two sentences! Really?\n\nA second paragraph…']) {
      const result = await textStats.handler({ text }, {} as never);
      expect(registry.checkResult('text_stats', result), JSON.stringify(result)).toEqual({
        ok: true,
      });
    }
  });
});
