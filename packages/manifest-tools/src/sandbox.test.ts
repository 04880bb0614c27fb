/**
 * Manifest tools through their handlers in a real sandbox: docker when it runs here, else
 * bwrap (TOOLGATE_SANDBOX_DRIVER picks one). Covers the Python and shell examples shipped in
 * plugins/examples and the failure paths.
 */
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ToolRegistry, type AnyToolSpec, type ToolContext } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox, type Workspaces } from '@toolgate/sandbox';
import { REPO_ROOT, testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadManifestTools } from './index.js';

const wanted = process.env.TOOLGATE_SANDBOX_DRIVER as 'docker' | 'bwrap' | undefined;
const driver =
  wanted ?? ((await whyDriverUnavailable('docker')) === undefined ? 'docker' : 'bwrap');
const unavailable = await whyDriverUnavailable(driver);
if (unavailable) console.warn(`manifest tool sandbox tests skipped: ${driver}: ${unavailable}`);

const quiet = { debug() {}, info() {}, error() {} };

describe.skipIf(unavailable !== undefined)(`manifest tools in the ${driver} sandbox`, () => {
  let dir: string;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  let tools: Map<string, AnyToolSpec>;
  let seq = 0;
  const ctx = (): ToolContext => ({
    callId: `manifest-${++seq}`,
    clientId: 'manifest-test',
    signal: new AbortController().signal,
    services: { sandbox, workspaces } as ToolContext['services'],
  });
  const call = (name: string, args: unknown) =>
    Promise.resolve(tools.get(name)!.handler(args, ctx()));

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-manifest-'));
    await chmod(dir, 0o711);
    const own = path.join(dir, 'tools');
    const put = async (name: string, manifest: object, files: Record<string, string> = {}) => {
      await mkdir(path.join(own, name), { recursive: true });
      await writeFile(path.join(own, name, 'tool.json'), JSON.stringify(manifest));
      for (const [f, text] of Object.entries(files)) await writeFile(path.join(own, name, f), text);
    };
    const common = { description: 'test', parameters: { type: 'object' }, timeoutSeconds: 5 };
    await put('fails', {
      ...common,
      name: 'fails',
      image: 'shell',
      command: 'echo oops >&2; exit 3',
    });
    await put('slow', {
      ...common,
      name: 'slow',
      image: 'shell',
      command: ['sleep', '30'],
      timeoutSeconds: 1,
    });
    await put('texty', {
      ...common,
      name: 'texty',
      image: 'shell',
      command: 'cat; echo; echo done',
    });
    await put(
      'nested',
      {
        ...common,
        name: 'nested',
        image: 'python',
        command: ['python3', 'pkg/m.py'],
        files: ['pkg/m.py'],
      },
      {},
    );
    await mkdir(path.join(own, 'nested', 'pkg'));
    await writeFile(
      path.join(own, 'nested', 'pkg', 'm.py'),
      'import os, json, sys\nprint(json.dumps({"cwd": os.getcwd(), "args": json.load(sys.stdin)}))\n',
    );
    await put('ws', {
      ...common,
      name: 'ws',
      image: 'shell',
      command: 'cat > /workspace/from-tool.json && ls /workspace',
      workspace: true,
      output: 'text',
    });
    await put('online', {
      ...common,
      name: 'online',
      image: 'shell',
      command: ['true'],
      network: true,
    });

    sandbox = await createSandbox(testSandboxConfig(driver, dir));
    workspaces = createWorkspaces(sandbox.config);
    const loaded = await loadManifestTools([path.join(REPO_ROOT, 'plugins/examples'), own], quiet, {
      images: Object.keys(sandbox.config.images),
    });
    expect(loaded.failed).toEqual([]);
    tools = new Map(loaded.tools.map((t) => [t.name, t]));
    await sandbox.warmUp();
  });

  afterAll(async () => {
    await sandbox?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('word_freq (Python example) answers JSON from stdin, as its result schema says', async () => {
    const answer = await call('word_freq', { text: 'The cat and the hat. The CAT sat!', top: 2 });
    expect(answer).toEqual({
      total: 8,
      distinct: 5,
      top: [
        { word: 'cat', count: 2 },
        { word: 'hat', count: 1 },
      ],
    });
    const registry = new ToolRegistry();
    registry.register(tools.get('word_freq')!);
    expect(registry.get('word_freq')?.result).toMatchObject({ type: 'object' });
    expect(registry.checkResult('word_freq', answer)).toEqual({ ok: true });
    const empty = await call('word_freq', { text: '' });
    expect(empty).toEqual({ total: 0, distinct: 0, top: [] });
    expect(registry.checkResult('word_freq', empty)).toEqual({ ok: true });
  });

  it("forwards the program's output to ctx.events as it comes", async () => {
    const seen: [string, string][] = [];
    const c: ToolContext = {
      ...ctx(),
      events: { output: (stream, text) => seen.push([stream, text]), progress: () => undefined },
    };
    await expect(Promise.resolve(tools.get('fails')!.handler({}, c))).rejects.toMatchObject({
      name: 'ToolError',
    });
    expect(seen).toEqual([['stderr', 'oops\n']]);
  });

  it('jq_query (shell example) answers, and fails readably', async () => {
    const json = JSON.stringify({
      items: [
        { n: 'a', p: 5 },
        { n: 'b', p: 12 },
        { n: 'c', p: 30 },
      ],
    });
    expect(await call('jq_query', { json, filter: '.items[] | select(.p > 10) | .n' })).toEqual([
      'b',
      'c',
    ]);
    expect(await call('jq_query', { json, filter: '.items | length' })).toBe(3);
    await expect(call('jq_query', { json, filter: '.items[' })).rejects.toMatchObject({
      name: 'ToolError',
      code: 'invalid_filter',
    });
    await expect(call('jq_query', { json: '{nope', filter: '.' })).rejects.toMatchObject({
      code: 'invalid_json',
    });
  });

  it('a failing program is a tool_error with its stderr; a slow one a timeout', async () => {
    await expect(call('fails', {})).rejects.toMatchObject({
      code: 'tool_error',
      message: 'fails failed (exit status 3): oops',
    });
    await expect(call('slow', {})).rejects.toMatchObject({ code: 'timeout' });
  });

  it('text output, files in subfolders, the working directory', async () => {
    expect(await call('texty', { a: 1 })).toBe('{"a":1}\ndone\n');
    expect(await call('nested', { x: [1, 2] })).toEqual({ cwd: '/tmp/tool', args: { x: [1, 2] } });
  });

  it('workspace: true mounts the client workspace; network: true is refused by default', async () => {
    expect(await call('ws', { hello: 'ws' })).toContain('from-tool.json');
    await expect(call('online', {})).rejects.toMatchObject({ code: 'sandbox_error' });
  });
});
