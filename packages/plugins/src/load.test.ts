import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ToolRegistry, type ToolContext } from '@toolgate/registry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPlugins, type PluginLogger } from './index.js';

let root: string;

function recorder() {
  const lines: { level: string; obj: object; msg?: string }[] = [];
  const at =
    (level: string) =>
    (obj: object, msg?: string): void => {
      lines.push({ level, obj, msg });
    };
  const logger: PluginLogger = {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
  };
  return { logger, lines };
}

async function plugin(dir: string, name: string, source: string, file = 'plugin.mjs') {
  await mkdir(path.join(dir, name), { recursive: true });
  await writeFile(path.join(dir, name, file), source);
}

const tool = (name: string, extra = '') => `{
  name: '${name}',
  description: 'a test tool',
  category: 'test',
  parameters: { type: 'object', properties: { x: { type: 'number' } } },
  handler: ({ x }) => x * 2,
  ${extra}
}`;

const ctx: ToolContext = {
  callId: 'c',
  clientId: 'x',
  signal: new AbortController().signal,
  services: {} as ToolContext['services'],
};

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'tg-plugins-'));
  const good = path.join(root, 'good');
  await plugin(good, 'a-object', `export default { name: 'obj', tools: [${tool('double')}] };`);
  await plugin(
    good,
    'b-factory',
    `export default async ({ env, ToolError, Type, dir }) => ({
      name: 'factory',
      tools: [{
        name: 'greet',
        description: 'greets ' + env.GREET_WHO + ' from ' + dir.split('/').pop(),
        category: 'test',
        parameters: Type.Object({ fail: Type.Optional(Type.Boolean()) }),
        handler: ({ fail }) => { if (fail) throw new ToolError('nope', 'asked to fail'); return 'hi'; },
      }],
    });`,
  );
  await plugin(good, 'c-js', `export default { tools: [${tool('js_tool')}] };`, 'plugin.js');
  await mkdir(path.join(good, 'not-a-plugin'));
  await writeFile(path.join(good, 'README.md'), 'not a directory');

  const bad = path.join(root, 'bad');
  await plugin(bad, 'a-syntax', 'export default { name: "x", tools: [ };');
  await plugin(bad, 'b-throws', 'throw new Error("cannot start: no API key");');
  await plugin(bad, 'c-no-default', 'export const tools = [];');
  await plugin(
    bad,
    'd-bad-schema',
    `export default { name: 'bad-schema', tools: [${tool('bad_schema', "parameters: { type: 'object', properties: { x: { type: 'nonsense' } } },").replace(/parameters: \{ type: 'object', properties: \{ x: \{ type: 'number' \} \} \},/, '')}] };`,
  );
  await plugin(
    bad,
    'e-dup-builtin',
    `export default { name: 'dup', tools: [${tool('calculator')}] };`,
  );
  await plugin(
    bad,
    'f-dup-inside',
    `export default { name: 'twice', tools: [${tool('same')}, ${tool('same')}] };`,
  );
  await plugin(
    bad,
    'g-dup-of-other',
    `export default { name: 'again', tools: [${tool('double')}] };`,
  );
  await plugin(bad, 'h-factory-throws', 'export default () => { throw new Error("boom"); };');
  await plugin(
    bad,
    'i-no-handler',
    "export default { name: 'x', tools: [{ name: 'x', description: 'd', category: 'c', parameters: { type: 'object' } }] };",
  );
  await plugin(bad, 'j-hangs', 'export default () => new Promise(() => {});');
  await plugin(bad, 'k-bad-name', `export default { name: 'n', tools: [${tool('has space')}] };`);
  await plugin(bad, 'l-empty', "export default { name: 'empty', tools: [] };");
  await plugin(
    bad,
    'm-lookahead',
    `export default { name: 'look', tools: [${tool('look', "result: { type: 'object', properties: { id: { type: 'string', pattern: '^(?!admin)' } } },")}] };`,
  );
  // A valid plugin after all the broken ones still loads.
  await plugin(bad, 'z-fine', `export default { name: 'fine', tools: [${tool('fine_tool')}] };`);
  await symlink(path.join(good, 'a-object'), path.join(root, 'linked'));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('loadPlugins', () => {
  it('loads object, factory and .js plugins; ignores folders without plugin.*', async () => {
    const { logger, lines } = recorder();
    const result = await loadPlugins([path.join(root, 'good')], logger, {
      env: { GREET_WHO: 'the world' },
    });
    expect(result.failed).toEqual([]);
    expect(result.loaded).toEqual([
      { name: 'obj', dir: path.join(root, 'good', 'a-object'), tools: ['double'] },
      { name: 'factory', dir: path.join(root, 'good', 'b-factory'), tools: ['greet'] },
      { name: 'c-js', dir: path.join(root, 'good', 'c-js'), tools: ['js_tool'] },
    ]);
    const registry = new ToolRegistry();
    registry.registerAll(result.tools);
    expect(registry.get('greet')?.description).toBe('greets the world from b-factory');
    expect(await registry.get('double')!.handler({ x: 21 }, ctx)).toBe(42);
    await expect(
      Promise.resolve().then(() => registry.get('greet')!.handler({ fail: true }, ctx)),
    ).rejects.toMatchObject({ name: 'ToolError', code: 'nope' });
    expect(lines.filter((l) => l.msg === 'plugin loaded')).toHaveLength(3);
  });

  it('reports and skips every kind of broken plugin, and loads the rest', async () => {
    const { logger, lines } = recorder();
    const result = await loadPlugins(
      [path.join(root, 'good'), path.join(root, 'bad'), path.join(root, 'missing')],
      logger,
      { reserved: ['calculator'], timeoutMs: 1000 },
    );
    expect(result.loaded.map((p) => p.name)).toEqual(['obj', 'factory', 'c-js', 'fine']);
    const errors = Object.fromEntries(result.failed.map((f) => [path.basename(f.dir), f.error]));
    expect(errors).toEqual({
      // Under vitest the import goes through Vite, whose message differs from Node's.
      'a-syntax': expect.stringMatching(/^cannot import plugin\.mjs: .*(SyntaxError|syntax)/),
      'b-throws': 'cannot import plugin.mjs: Error: cannot start: no API key',
      'c-no-default': expect.stringContaining('no default export'),
      'd-bad-schema': expect.stringContaining('invalid schema'),
      'e-dup-builtin': 'tool "calculator" is already provided by toolgate or another plugin',
      'f-dup-inside': 'tool "same" is already registered',
      'g-dup-of-other': 'tool "double" is already provided by toolgate or another plugin',
      'h-factory-throws': 'its setup function threw: Error: boom',
      'i-no-handler': 'tool "x": "handler" must be a function',
      'j-hangs': 'did not finish loading within 1000 ms',
      'k-bad-name': expect.stringContaining('must match'),
      'l-empty': expect.stringContaining('non-empty array'),
      // every pattern runs on RE2 (linear time): one it cannot run refuses the plugin, named
      'm-lookahead':
        'tool "look": the pattern "^(?!admin)" at /result/properties/id/pattern cannot run in linear time: lookahead',
    });
    expect(lines.filter((l) => l.level === 'error')).toHaveLength(13);
    const registry = new ToolRegistry();
    expect(() => registry.registerAll(result.tools)).not.toThrow();
  });

  it('follows symlinked plugin folders', async () => {
    const { logger } = recorder();
    const result = await loadPlugins([root], logger);
    expect(result.loaded.map((p) => p.name)).toEqual(['obj']);
  });
});
