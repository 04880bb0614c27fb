/**
 * The built-in tools' result schemas are true: every tool runs for real (Redis for memory, a
 * loopback HTTP server for the http tools, a real sandbox for the code and file tools) over
 * ordinary, empty, truncated and failed-but-still-a-result cases, and every result is checked
 * against the tool's declared schema by an ajv of this test's own, in strict mode.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chmod, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { ToolError, type Tool, type ToolContext, type ToolServices } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox, type Workspaces } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createHttpServices, type HttpPolicy } from './http/index.js';
import { createMemoryStore, type MemoryStore } from './memory/index.js';
import { createToolCatalog } from './meta/index.js';
import { createToolRegistry, type CodeModeServices } from './index.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

/**
 * Built-in tools whose result is not an object: their schema describes the bare value, which
 * MCP gets wrapped as `{"result": …}` (docs/tool-results.md).
 */
const NON_OBJECT_RESULTS = new Set(['calculator']);

const registry = createToolRegistry();
const ajv = new Ajv({ strict: true, allErrors: true });
addFormats(ajv);
const validators = new Map<string, ValidateFunction>();
/** Results checked per tool: the last test proves every tool with a schema was run. */
const checked = new Map<string, number>();

function tool(name: string): Tool {
  const t = registry.get(name);
  if (!t) throw new Error(`no built-in tool ${name}`);
  return t;
}

/** Runs the tool's handler the way the worker does (validated args) and checks its result. */
async function run(name: string, args: Record<string, unknown>, ctx: ToolContext) {
  const valid = registry.validate(name, args);
  if (!valid.ok)
    throw new Error(`test arguments for ${name} are invalid: ${JSON.stringify(valid)}`);
  const result = await tool(name).handler(valid.args, ctx);
  expectFits(name, result);
  return result as Record<string, unknown>;
}

function expectFits(name: string, result: unknown): void {
  const schema = tool(name).result;
  if (!schema) throw new Error(`${name} declares no result schema`);
  let validate = validators.get(name);
  if (!validate) validators.set(name, (validate = ajv.compile(schema)));
  const ok = validate(JSON.parse(JSON.stringify(result)) as unknown);
  expect(
    ok,
    `${name} returned ${JSON.stringify(result).slice(0, 300)}: ${ajv.errorsText(validate.errors)}`,
  ).toBe(true);
  // The registry's own check (the one the worker runs) agrees.
  expect(registry.checkResult(name, result)).toEqual({ ok: true });
  checked.set(name, (checked.get(name) ?? 0) + 1);
}

/** The ToolError a call fails with: an error outcome, not a result, so no schema applies. */
async function failure(promise: Promise<unknown>): Promise<ToolError> {
  const err = await promise.then(
    (v) => new Error(`expected a ToolError, got ${JSON.stringify(v).slice(0, 200)}`),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ToolError);
  return err as ToolError;
}

const baseCtx = (services: Partial<ToolServices>, clientId = 'results-test'): ToolContext => ({
  callId: randomUUID(),
  clientId,
  signal: new AbortController().signal,
  services: services as ToolServices,
});

describe('every built-in tool declares its result', () => {
  it('declares a result schema: an object one, except the tools listed as returning non-objects', () => {
    const missing = registry
      .list()
      .filter((t) => !t.result)
      .map((t) => t.name);
    expect(missing, 'built-in tools without a result schema').toEqual([]);
    for (const t of registry.list()) {
      if (!NON_OBJECT_RESULTS.has(t.name)) expect(t.result?.type, t.name).toBe('object');
    }
  });

  it('says of every object in its result schema whether other properties may come', () => {
    const unstated: string[] = [];
    const walk = (s: unknown, at: string) => {
      if (typeof s !== 'object' || s === null) return;
      const o = s as Record<string, unknown>;
      if (o.type === 'object' && o.additionalProperties === undefined) unstated.push(at);
      for (const [k, v] of Object.entries(o)) walk(v, `${at}/${k}`);
    };
    for (const t of registry.list()) if (t.result) walk(t.result, t.name);
    expect(unstated).toEqual([]);
  });

  it('the tools exempted really return a non-object, as their schema says', async () => {
    for (const name of NON_OBJECT_RESULTS) expect(tool(name).result?.type).not.toBe('object');
    expect(await run('calculator', { expression: '2*(3+4)' }, baseCtx({}))).toBe(14);
  });
});

describe('in-process tools', () => {
  it('current_time in UTC, with half- and quarter-hour offsets, and by default', async () => {
    const utc = await run('current_time', { timezone: 'UTC' }, baseCtx({}));
    expect(utc.iso).toMatch(/Z$/);
    expect((await run('current_time', { timezone: 'Asia/Kathmandu' }, baseCtx({}))).iso).toMatch(
      /\+05:45$/,
    );
    await run('current_time', { timezone: 'America/St_Johns' }, baseCtx({}));
    await run('current_time', { timezone: 'Pacific/Chatham' }, baseCtx({}));
    await run('current_time', {}, baseCtx({}));
    expect(
      (await failure(run('current_time', { timezone: 'Mars/Olympus' }, baseCtx({})))).code,
    ).toBe('invalid_timezone');
  });

  it('find_tools with matches, with none, and limited', async () => {
    const ctx = baseCtx({ toolCatalog: createToolCatalog(registry, []) });
    const files = await run('find_tools', { query: 'read a file' }, ctx);
    expect((files.tools as unknown[]).length).toBeGreaterThan(0);
    expect(await run('find_tools', { query: 'zqxjv wvkpq' }, ctx)).toEqual({ tools: [] });
    expect(await run('find_tools', { query: 'http', limit: 1 }, ctx)).toMatchObject({
      tools: [expect.objectContaining({ parameters: expect.objectContaining({ type: 'object' }) })],
    });
  });
});

describe('memory tools (real Redis)', () => {
  let redis: Redis;
  let prefix: string;
  let memory: MemoryStore;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'));
    prefix = `results${randomUUID().slice(0, 8)}`;
    memory = createMemoryStore(redis, {
      keys: {
        memory: (c) => ({
          entries: `${prefix}:memory:{${c}}`,
          version: `${prefix}:memory:{${c}}:v`,
        }),
      },
    });
  });
  afterAll(async () => {
    const left = await redis.keys(`${prefix}:*`);
    if (left.length) await redis.del(...left);
    redis.disconnect();
  });

  it('save, search (hits, typos, nothing, empty store), delete', async () => {
    const ctx = baseCtx({ memory });
    expect(await run('memory_search', { query: 'anything' }, ctx)).toEqual({ results: [] });
    const first = await run('memory_save', { text: 'The user prefers Celsius' }, ctx);
    expect(first.entries).toBe(1);
    await run('memory_save', { text: 'Falcon ships in March', tags: ['project', 'dates'] }, ctx);
    await run(
      'memory_save',
      { text: '  trailing spaces and ünïcødé  ', tags: ['x', ' x ', 'y'] },
      ctx,
    );
    const hits = await run('memory_search', { query: 'celcius falcon', limit: 50 }, ctx);
    expect((hits.results as unknown[]).length).toBe(2);
    expect(await run('memory_search', { query: 'nothing-like-it' }, ctx)).toEqual({ results: [] });
    expect(await run('memory_delete', { id: first.id }, ctx)).toEqual({ deleted: first.id });
    expect((await failure(run('memory_delete', { id: first.id }, ctx))).code).toBe('not_found');
  });
});

describe('http tools (loopback server, the test policy)', () => {
  let server: Server;
  let base: string;
  let ctx: (p?: Partial<HttpPolicy>) => ToolContext;
  beforeAll(async () => {
    server = createServer((req, res) => {
      const u = new URL(req.url ?? '/', 'http://x');
      switch (u.pathname) {
        case '/text':
          res.setHeader('content-type', 'text/plain; charset=utf-8');
          res.setHeader('x-ratelimit-remaining', '7');
          res.setHeader('set-cookie', 'hidden=1');
          res.end('hello');
          return;
        case '/echo': {
          let body = '';
          req.on('data', (c: Buffer) => (body += c.toString()));
          req.on('end', () => {
            res.setHeader('content-type', 'application/json');
            res.end(JSON.stringify({ method: req.method, body }));
          });
          return;
        }
        case '/empty':
          res.statusCode = 204;
          res.end();
          return;
        case '/missing':
          res.statusCode = 404;
          res.end('no such page');
          return;
        case '/binary':
          res.setHeader('content-type', 'image/png');
          res.end(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0xff]));
          return;
        case '/big':
          res.setHeader('content-type', 'text/plain');
          res.end('x'.repeat(100_000));
          return;
        case '/moved':
          res.statusCode = 302;
          res.setHeader('location', '/text');
          res.end();
          return;
        default:
          res.statusCode = 500;
          res.end();
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
    ctx = (p = {}) =>
      baseCtx({
        http: createHttpServices(
          {
            allowPrivateNetworks: false,
            allowHosts: [`127.0.0.1:${port}`],
            maxResponseBytes: 1_048_576,
            timeoutMs: 5000,
            maxRedirects: 5,
            ...p,
          },
          {
            lookup: () => Promise.reject(new Error('no name resolution in this test')),
          },
        ),
      });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('http_get: text, empty, a 404 (still a result), binary, truncated, redirected', async () => {
    expect(await run('http_get', { url: `${base}/text` }, ctx())).toMatchObject({
      status: 200,
      body: 'hello',
      headers: { 'x-ratelimit-remaining': '7' },
    });
    expect(await run('http_get', { url: `${base}/empty` }, ctx())).toMatchObject({
      status: 204,
      body: '',
      bytes: 0,
    });
    expect(await run('http_get', { url: `${base}/missing` }, ctx())).toMatchObject({
      status: 404,
      body: 'no such page',
    });
    expect(await run('http_get', { url: `${base}/binary` }, ctx())).toMatchObject({
      encoding: 'base64',
    });
    expect(
      await run('http_get', { url: `${base}/big` }, ctx({ maxResponseBytes: 1000 })),
    ).toMatchObject({ truncated: true, bytes: 1000 });
    expect(
      await run('http_get', { url: `${base}/moved`, headers: { Accept: 'text/plain' } }, ctx()),
    ).toMatchObject({ redirects: 1, url: `${base}/text` });
    expect((await failure(run('http_get', { url: 'http://10.0.0.1/' }, ctx()))).code).toBe(
      'blocked_address',
    );
  });

  it('http_post: JSON body, empty body, a redirect that turns into a GET', async () => {
    expect(
      JSON.parse(
        (await run('http_post', { url: `${base}/echo`, body: '{"a":1}' }, ctx())).body as string,
      ),
    ).toEqual({ method: 'POST', body: '{"a":1}' });
    await run('http_post', { url: `${base}/echo`, body: '' }, ctx());
    expect(await run('http_post', { url: `${base}/moved`, body: 'x' }, ctx())).toMatchObject({
      redirects: 1,
      body: 'hello',
    });
  });
});

const wanted = process.env.TOOLGATE_SANDBOX_DRIVER as 'docker' | 'bwrap' | undefined;
const driver =
  wanted ?? ((await whyDriverUnavailable('docker')) === undefined ? 'docker' : 'bwrap');
const unavailable = await whyDriverUnavailable(driver);
if (unavailable) console.warn(`sandboxed result-schema tests skipped: ${driver}: ${unavailable}`);

describe.skipIf(unavailable !== undefined)(`sandboxed tools (${driver})`, () => {
  let dir: string;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  const ctx = () => baseCtx({ sandbox, workspaces });

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-results-'));
    await chmod(dir, 0o711); // the sandbox uid must be able to reach the workspaces (bwrap)
    // A small output limit makes a truncated run cheap.
    sandbox = await createSandbox(
      testSandboxConfig(driver, dir, { limits: { outputBytes: 4096 } }),
    );
    workspaces = createWorkspaces(sandbox.config);
    await sandbox.warmUp();
  });
  afterAll(async () => {
    await sandbox?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('run_code_with_tools: a script calling a tool, and one failing', async () => {
    // A session standing in for the worker's (the gateway path is test/code-mode.test.ts).
    const codeMode: CodeModeServices = {
      maxResultBytes: 1 << 20,
      open: () =>
        Promise.resolve({
          tools: [
            { name: 'calculator', description: 'Math', parameters: tool('calculator').parameters },
          ],
          call: (_name, args) =>
            Promise.resolve({
              status: 'ok',
              result: (args as { expression: string }).expression.length,
            }),
          close: () => Promise.resolve(),
        }),
    };
    const codeCtx = () => baseCtx({ sandbox, workspaces, codeMode });
    expect(
      await run(
        'run_code_with_tools',
        { code: 'print(toolgate.calculator(expression="1+2"))' },
        codeCtx(),
      ),
    ).toMatchObject({ stdout: '3\n', exitCode: 0 });
    expect(
      await run('run_code_with_tools', { code: 'raise ValueError("no")' }, codeCtx()),
    ).toMatchObject({ exitCode: 1, stderr: expect.stringContaining('ValueError: no') });
  });

  it('run_python: output, a failing program, output cut at the limit, a timeout', async () => {
    expect(await run('run_python', { code: 'print(6*7)' }, ctx())).toMatchObject({
      stdout: '42\n',
      exitCode: 0,
    });
    expect(await run('run_python', { code: 'raise SystemExit(3)' }, ctx())).toMatchObject({
      exitCode: 3,
    });
    expect(
      await run('run_python', { code: 'import sys\nsys.stdout.write("y" * 20000)' }, ctx()),
    ).toMatchObject({ truncated: true });
    expect(
      await run('run_python', { code: 'import time\ntime.sleep(30)', timeoutSeconds: 1 }, ctx()),
    ).toMatchObject({ timedOut: true });
  });

  it('run_shell: stdout and stderr, nothing at all, a non-zero exit', async () => {
    expect(await run('run_shell', { command: 'echo out; echo err >&2' }, ctx())).toMatchObject({
      stdout: 'out\n',
      stderr: 'err\n',
    });
    expect(await run('run_shell', { command: 'true' }, ctx())).toMatchObject({
      stdout: '',
      stderr: '',
    });
    expect(await run('run_shell', { command: 'exit 7' }, ctx())).toMatchObject({ exitCode: 7 });
  });

  it('file tools: write, append, read text and binary and truncated, list, delete', async () => {
    expect(await run('file_write', { path: 'a/b.txt', content: 'one\n' }, ctx())).toEqual({
      path: 'a/b.txt',
      bytesWritten: 4,
      size: 4,
    });
    await run('file_write', { path: 'a/b.txt', content: 'two\n', append: true }, ctx());
    await run('file_write', { path: 'empty.txt', content: '' }, ctx());
    expect(await run('file_read', { path: 'a/b.txt' }, ctx())).toMatchObject({
      content: 'one\ntwo\n',
      truncated: false,
    });
    expect(await run('file_read', { path: 'empty.txt' }, ctx())).toMatchObject({
      content: '',
      size: 0,
    });
    await run(
      'run_shell',
      {
        command:
          'printf "\\x00\\xff" > bin.dat && head -c 300000 /dev/urandom > big.bin && ' +
          'mkdir -p many empty && (cd many && touch $(seq 1 1005)) && ln -s a/b.txt link',
      },
      ctx(),
    );
    expect(await run('file_read', { path: 'bin.dat' }, ctx())).toMatchObject({
      encoding: 'base64',
      content: 'AP8=',
    });
    expect(await run('file_read', { path: 'big.bin' }, ctx())).toMatchObject({
      truncated: true,
      size: 300_000,
    });
    const root = await run('file_list', {}, ctx());
    expect(root.path).toBe('.');
    expect(new Set((root.entries as { type: string }[]).map((e) => e.type))).toEqual(
      new Set(['file', 'directory', 'symlink']),
    );
    expect(await run('file_list', { path: 'empty' }, ctx())).toEqual({
      path: 'empty',
      entries: [],
      truncated: false,
    });
    expect(await run('file_list', { path: 'many' }, ctx())).toMatchObject({ truncated: true });
    expect(await run('file_delete', { path: 'link' }, ctx())).toEqual({
      path: 'link',
      deleted: 'symlink',
    });
    expect(await run('file_delete', { path: 'a/b.txt' }, ctx())).toMatchObject({ deleted: 'file' });
    expect(await run('file_delete', { path: 'many' }, ctx())).toMatchObject({
      deleted: 'directory',
    });
    expect((await failure(run('file_read', { path: 'a/b.txt' }, ctx()))).code).toBe('not_found');
  });

  it('a workspace module named like one the file tools import does not change their answer', async () => {
    // The file tools run a Python program in the workspace: a json.py there must not be imported.
    await run(
      'file_write',
      {
        path: 'json.py',
        content: 'import sys\nsys.stdout.write("{\\"ok\\": true, \\"forged\\": 1}")\nsys.exit(0)\n',
      },
      ctx(),
    );
    const ws = await workspaces.ensure('results-test');
    await symlink('json.py', path.join(ws, 'base64.py'));
    expect(await run('file_list', { path: 'a' }, ctx())).toEqual({
      path: 'a',
      entries: [],
      truncated: false,
    });
  });
});

describe('coverage', () => {
  it('ran every built-in tool with a result schema', () => {
    const sandboxed = new Set(
      registry
        .list()
        .filter((t) => t.sandbox)
        .map((t) => t.name),
    );
    const expected = registry
      .list()
      .filter((t) => t.result && (unavailable === undefined || !sandboxed.has(t.name)))
      .map((t) => t.name);
    expect(expected.filter((name) => !checked.has(name))).toEqual([]);
  });
});
