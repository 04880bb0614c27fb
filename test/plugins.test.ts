/**
 * Plugins as the services load them: the examples under plugins/examples through the whole
 * stack (stock_quote against a local quote server, cached 60 s; the declarative word_freq and
 * jq_query in a real sandbox), broken plugins under plain Node (not Vite), and the examples'
 * own node:test files.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { loadExtensions, loadPlugins, type LoadResult } from '@toolgate/plugins';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { createToolRegistry } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

const run = promisify(execFile);
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const EXAMPLES = path.join(ROOT, 'plugins/examples');

let upstream: Server;
let upstreamHits = 0;
let plugins: LoadResult;
let stack: Stack;

beforeAll(async () => {
  upstream = createServer((req, res) => {
    upstreamHits++;
    const symbol = new URL(req.url!, 'http://x').searchParams.get('symbol');
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify(
        symbol === 'MSFT'
          ? { c: 411.2, d: -2.1, dp: -0.51, h: 415, l: 409.9, o: 414, pc: 413.3, t: 1767196800 }
          : { c: 0, d: null, dp: null, h: 0, l: 0, o: 0, pc: 0, t: 0 },
      ),
    );
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const port = (upstream.address() as { port: number }).port;
  plugins = await loadPlugins([EXAMPLES], quiet, {
    reserved: createToolRegistry()
      .list()
      .map((t) => t.name),
    env: { STOCK_QUOTE_URL: `http://127.0.0.1:${port}/api/v1/quote?symbol={symbol}` },
  });
  stack = await startStack({ tools: plugins.tools });
});

afterAll(async () => {
  await stack?.close();
  upstream?.closeAllConnections();
  upstream?.close();
});

const execute = async (tool: string, args: unknown) => {
  const res = await stack.call(`/tools/${tool}/execute`, { json: args, key: KEYS.alice });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

describe('example plugins', () => {
  it('all load', () => {
    expect(plugins.failed).toEqual([]);
    expect(plugins.loaded.map((p) => [p.name, p.tools])).toEqual([
      ['stock_quote', ['stock_quote']],
      ['text_stats', ['text_stats']],
    ]);
  });

  it('are listed like any tool', async () => {
    const res = await stack.call('/tools/openai?q=stock%20price');
    const tools = (await res.json()) as { function: { name: string } }[];
    expect(tools[0]?.function.name).toBe('stock_quote');
  });

  it('two gateways with the plugins loaded in opposite orders list byte-identical tools', async () => {
    expect(plugins.tools.length).toBeGreaterThan(1);
    const reversed = await startStack({ tools: [...plugins.tools].reverse() });
    try {
      const paths = [
        '/tools',
        '/tools/openai',
        '/tools/openai?strict=true',
        '/tools/openai-responses',
        '/tools/anthropic?cache_control=ephemeral',
        '/tools/anthropic?defer_loading=stock_quote,text_stats&tool_search=bm25',
        '/tools/openai?q=text',
      ];
      for (const p of paths) {
        const [a, b] = await Promise.all([stack.call(p), reversed.call(p)]);
        expect(a.status, p).toBe(200);
        expect(await b.text(), p).toBe(await a.text());
      }
    } finally {
      await reversed.close();
    }
  });

  it('stock_quote asks the configured upstream once per minute per symbol', async () => {
    upstreamHits = 0;
    const first = await execute('stock_quote', { symbol: 'msft' });
    expect(first).toMatchObject({
      status: 200,
      body: {
        status: 'ok',
        cached: false,
        result: { symbol: 'MSFT', price: 411.2, previousClose: 413.3 },
      },
    });
    const second = await execute('stock_quote', { symbol: 'msft' });
    expect(second.body).toMatchObject({ status: 'ok', cached: true, result: { price: 411.2 } });
    expect(upstreamHits).toBe(1);
  });

  it('stock_quote: unknown symbols are readable tool errors, bad ones refused', async () => {
    const unknown = await execute('stock_quote', { symbol: 'ZZZZ' });
    expect(unknown).toMatchObject({
      status: 200,
      body: { status: 'error', error: { code: 'unknown_symbol' } },
    });
    const bad = await execute('stock_quote', { symbol: 'MSFT; rm -rf /' });
    expect(bad.status).toBe(400);
  });

  it('text_stats runs', async () => {
    const { body } = await execute('text_stats', { text: 'One two. Three!' });
    expect(body).toMatchObject({ status: 'ok', result: { words: 3, sentences: 2 } });
  });

  it('their own node:test files pass', async () => {
    const files = ['stock_quote', 'text_stats'].map((p) =>
      path.join(EXAMPLES, p, 'plugin.test.mjs'),
    );
    const { stdout } = await run(process.execPath, ['--test', '--test-reporter=tap', ...files]);
    expect(stdout).toMatch(/^# fail 0$/m);
    expect(stdout).toMatch(/^# pass [1-9]/m);
  });
});

describe('broken plugins under plain Node', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-broken-'));
    const put = async (name: string, source: string) => {
      await mkdir(path.join(dir, name));
      await writeFile(path.join(dir, name, 'plugin.mjs'), source);
    };
    await put('a-syntax', 'export default {\n  name: "x",\n  tools: [ ,, }\n};\n');
    await put('b-import', "import 'no-such-package-anywhere';\nexport default {};\n");
    await put(
      'c-good',
      'export default ' +
        JSON.stringify({ name: 'good', tools: [] }).replace(
          '[]',
          `[{ name: 'good_tool', description: 'ok', category: 't', parameters: { type: 'object' }, handler: () => 1 }]`,
        ),
    );
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('are reported with the file and line, and the rest loads', async () => {
    // The same import() the services do, outside Vite's module runner.
    const script = `
      import { loadPlugins } from '@toolgate/plugins';
      const r = await loadPlugins([${JSON.stringify(dir)}], { debug() {}, info() {}, warn() {}, error() {} });
      console.log(JSON.stringify({ loaded: r.loaded.map((p) => p.name), failed: r.failed }));
    `;
    const { stdout } = await run(
      process.execPath,
      ['--conditions=@toolgate/source', '--import', 'tsx', '--input-type=module', '-e', script],
      { cwd: path.join(ROOT, 'test') },
    );
    const result = JSON.parse(stdout) as {
      loaded: string[];
      failed: { dir: string; error: string }[];
    };
    expect(result.loaded).toEqual(['good']);
    expect(result.failed).toEqual([
      {
        dir: path.join(dir, 'a-syntax'),
        error: "cannot import plugin.mjs: SyntaxError: Unexpected token '}' (at plugin.mjs:3)",
      },
      {
        dir: path.join(dir, 'b-import'),
        error: expect.stringContaining("Cannot find package 'no-such-package-anywhere'"),
      },
    ]);
  });
});

// Declarative tools (tool.yaml) need a real sandbox: docker when it answers here, else bwrap.
const driver = (await whyDriverUnavailable('docker')) === undefined ? 'docker' : 'bwrap';
const noSandbox = await whyDriverUnavailable(driver);
if (noSandbox) console.warn(`declarative tools through the stack skipped: ${driver}: ${noSandbox}`);

describe.skipIf(noSandbox !== undefined)(`declarative tools through the stack (${driver})`, () => {
  let sandboxStack: Stack;
  let sandbox: Sandbox;
  let dir: string;
  let all: Awaited<ReturnType<typeof loadExtensions>>;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-decl-'));
    sandbox = await createSandbox(testSandboxConfig(driver, dir));
    all = await loadExtensions([EXAMPLES], quiet, {
      reserved: createToolRegistry()
        .list()
        .map((t) => t.name),
      env: { STOCK_QUOTE_URL: 'http://127.0.0.1:9/quote?symbol={symbol}' },
      images: Object.keys(sandbox.config.images),
    });
    await sandbox.warmUp(60_000);
    sandboxStack = await startStack({
      tools: all.tools,
      services: { sandbox, workspaces: createWorkspaces(sandbox.config) },
    });
  }, 120_000);
  afterAll(async () => {
    await sandboxStack?.close();
    await sandbox?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const run = async (tool: string, args: unknown) =>
    (await (
      await sandboxStack.call(`/tools/${tool}/execute`, { json: args, key: KEYS.alice })
    ).json()) as Record<string, unknown>;

  it('loadExtensions finds the plugins and the manifests', () => {
    expect(all.failed).toEqual([]);
    expect(all.loaded.map((l) => [l.name, all.kinds[l.dir]])).toEqual([
      ['stock_quote', 'plugin'],
      ['text_stats', 'plugin'],
      ['jq_query', 'manifest'],
      ['word_freq', 'manifest'],
    ]);
  });

  it('word_freq (Python) and jq_query (shell) run in throwaway sandboxes', async () => {
    expect(
      await run('word_freq', { text: 'to be or not to be', keepStopWords: true, top: 1 }),
    ).toMatchObject({
      status: 'ok',
      result: { total: 6, distinct: 4, top: [{ word: 'be', count: 2 }] },
    });
    expect(await run('jq_query', { json: '{"a":[1,2,3]}', filter: '[.a[] * 10]' })).toMatchObject({
      status: 'ok',
      result: [10, 20, 30],
    });
    expect(await run('jq_query', { json: '{}', filter: '.[' })).toMatchObject({
      status: 'error',
      error: { code: 'invalid_filter', message: expect.stringContaining('jq:') },
    });
  });

  it('a manifest tool is listed with its schema like any other', async () => {
    const res = await sandboxStack.call('/tools?q=jq');
    const [tool] = (await res.json()) as { name: string; sandboxed: boolean; parameters: object }[];
    expect(tool).toMatchObject({
      name: 'jq_query',
      sandboxed: true,
      parameters: { required: ['json', 'filter'], additionalProperties: false },
    });
  });
});
