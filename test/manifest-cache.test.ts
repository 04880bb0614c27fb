/**
 * Issue 11: a declarative tool that reads the caller's workspace caches per client, so one
 * client's cached result never answers another client's call (real sandbox, real workspaces).
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadExtensions } from '@toolgate/plugins';
import { createSandbox, createWorkspaces, type Sandbox, type Workspaces } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { createToolRegistry } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const driver = (await whyDriverUnavailable('docker')) === undefined ? 'docker' : 'bwrap';
const noSandbox = await whyDriverUnavailable(driver);
if (noSandbox) console.warn(`manifest cache scope skipped: ${driver}: ${noSandbox}`);

describe.skipIf(noSandbox !== undefined)(`workspace manifests cache per client (${driver})`, () => {
  let stack: Stack;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-wscache-'));
    const tools = path.join(dir, 'tools');
    await mkdir(path.join(tools, 'read_note'), { recursive: true });
    await writeFile(
      path.join(tools, 'read_note', 'tool.yaml'),
      [
        'name: read_note',
        'description: Reads note.txt from the caller workspace',
        'parameters: { type: object, properties: {} }',
        'image: shell',
        'command: cat /workspace/note.txt',
        'workspace: true',
        'output: text',
        'cacheTtlSeconds: 300',
      ].join('\n'),
    );
    sandbox = await createSandbox(testSandboxConfig(driver, dir));
    workspaces = createWorkspaces(sandbox.config);
    const loaded = await loadExtensions([tools], quiet, {
      reserved: createToolRegistry()
        .list()
        .map((t) => t.name),
      images: Object.keys(sandbox.config.images),
    });
    expect(loaded.failed).toEqual([]);
    await sandbox.warmUp(60_000);
    stack = await startStack({
      tools: loaded.tools,
      services: { sandbox, workspaces },
      config: {
        clients: [
          { id: 'alice', key: KEYS.alice, tools: ['read_note'] },
          { id: 'bob', key: KEYS.bob, tools: ['read_note'] },
        ],
      },
    });
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
    await sandbox?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("one client's cached workspace result never answers another client", async () => {
    for (const [client, text] of [
      ['alice', 'alice private note'],
      ['bob', 'bob private note'],
    ] as const) {
      const file = path.join(await workspaces.ensure(client), 'note.txt');
      await writeFile(file, text, { mode: 0o644 });
    }
    const read = async (key: string) =>
      (await (await stack.call('/tools/read_note/execute', { json: {}, key })).json()) as Record<
        string,
        unknown
      >;
    expect(await read(KEYS.alice)).toMatchObject({
      status: 'ok',
      result: 'alice private note',
      cached: false,
    });
    // Same tool, same arguments, another client: its own workspace, not alice's cached answer.
    expect(await read(KEYS.bob)).toMatchObject({
      status: 'ok',
      result: 'bob private note',
      cached: false,
    });
    // Each client's own repeat is still served from the cache.
    expect(await read(KEYS.alice)).toMatchObject({ result: 'alice private note', cached: true });
    expect(await read(KEYS.bob)).toMatchObject({ result: 'bob private note', cached: true });
  }, 60_000);
});
