/** The `toolgate` bin as a user runs it, and the plugin it scaffolds as toolgate loads it. */
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ToolRegistry, type ToolContext } from '@toolgate/registry';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPlugins } from '@toolgate/plugins';

const run = promisify(execFile);
const BIN = fileURLToPath(new URL('../../bin/toolgate.mjs', import.meta.url));
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

let cwd: string;
beforeAll(async () => {
  cwd = await mkdtemp(path.join(tmpdir(), 'tg-cli-'));
});
afterAll(async () => {
  await rm(cwd, { recursive: true, force: true });
});

async function toolgate(...args: string[]) {
  const env = { ...process.env, INIT_CWD: cwd };
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, ...args], { cwd, env });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('toolgate plugin new', () => {
  it('scaffolds a plugin whose own test passes and that toolgate loads', async () => {
    const made = await toolgate('plugin', 'new', 'weather-now', '--dir', 'my-plugins');
    expect(made).toMatchObject({ code: 0, stderr: '' });
    expect(made.stdout).toContain(path.join(cwd, 'my-plugins', 'weather-now'));
    const dir = path.join(cwd, 'my-plugins', 'weather-now');
    expect((await readdir(dir)).sort()).toEqual(['README.md', 'plugin.mjs', 'plugin.test.mjs']);

    const test = await run(process.execPath, [
      '--test',
      '--test-reporter=tap',
      path.join(dir, 'plugin.test.mjs'),
    ]);
    expect(test.stdout).toMatch(/# pass 3/);
    expect(test.stdout).toMatch(/# fail 0/);

    const { loaded, failed, tools } = await loadPlugins([path.join(cwd, 'my-plugins')], quiet, {
      env: { WEATHER_NOW_GREETING: 'Hi' },
    });
    expect(failed).toEqual([]);
    expect(loaded).toEqual([{ name: 'weather-now', dir, tools: ['weather_now'] }]);
    const registry = new ToolRegistry();
    registry.registerAll(tools);
    const ctx = { signal: new AbortController().signal } as ToolContext;
    expect(await registry.get('weather_now')!.handler({ name: 'Ada' }, ctx)).toEqual({
      message: 'Hi, Ada!',
    });
    expect(registry.validate('weather_now', { name: 'Ada', extra: 1 }).ok).toBe(false);
  });

  it('refuses to overwrite, and bad names, with a message', async () => {
    await toolgate('plugin', 'new', 'twice');
    const again = await toolgate('plugin', 'new', 'twice');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('already exists');
    expect((await toolgate('plugin', 'new', 'twice', '--force')).code).toBe(0);
    const bad = await toolgate('plugin', 'new', 'Bad Name');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('not a valid plugin name');
  });

  it('prints usage for anything else', async () => {
    const res = await toolgate('plugins', 'make');
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('unknown command "plugins"');
    const missing = await toolgate('plugin', 'new');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('usage: toolgate plugin new <name>');
    const help = await toolgate('plugin', 'new', '--help');
    expect(help).toMatchObject({ code: 0 });
    expect(help.stdout).toContain('usage: toolgate plugin new <name>');
  });
});
