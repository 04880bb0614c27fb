/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned) against a
 * real gateway and worker serving the suite's test tools (test/fixtures/mcp-conformance) and,
 * in the same listing, an upstream MCP server (the real server-everything, docs/upstreams.md).
 * The scenarios a tool gateway cannot serve are listed in NOT_APPLICABLE with the reason; every
 * other scenario must pass. docs/mcp.md has the table.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadPlugins, type LoadResult } from '@toolgate/plugins';
import { createToolRegistry } from '@toolgate/tools';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEverything, type Everything } from './support/everything.js';
import { startKeyProxy } from './support/key-proxy.js';
import { ROOT } from './support/process.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

const CONFORMANCE = path.join(ROOT, 'test/node_modules/.bin/conformance');
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** Scenarios of the active suite a tool gateway does not serve, and why. */
export const NOT_APPLICABLE: Record<string, string> = {
  'completion-complete': 'completions are for prompt and resource arguments; toolgate has neither',
  'tools-call-image':
    'toolgate tools return JSON values (text + structuredContent), not image content blocks',
  'tools-call-audio': 'toolgate tools return JSON values, not audio content blocks',
  'tools-call-embedded-resource': 'toolgate tools return JSON values, not embedded resources',
  'tools-call-mixed-content': 'toolgate tools return JSON values, not mixed content blocks',
  'tools-call-sampling':
    'tools run in workers behind a queue; they cannot ask the client’s model (sampling)',
  'tools-call-elicitation': 'tools run in workers behind a queue; they cannot ask the user',
  'elicitation-sep1034-defaults': 'no elicitation (see tools-call-elicitation)',
  'elicitation-sep1330-enums': 'no elicitation (see tools-call-elicitation)',
  'resources-list': 'toolgate serves tools only, no resources',
  'resources-read-text': 'toolgate serves tools only, no resources',
  'resources-read-binary': 'toolgate serves tools only, no resources',
  'resources-templates-read': 'toolgate serves tools only, no resources',
  'resources-subscribe': 'toolgate serves tools only, no resources',
  'resources-unsubscribe': 'toolgate serves tools only, no resources',
  'prompts-list': 'toolgate serves tools only, no prompts',
  'prompts-get-simple': 'toolgate serves tools only, no prompts',
  'prompts-get-with-args': 'toolgate serves tools only, no prompts',
  'prompts-get-embedded-resource': 'toolgate serves tools only, no prompts',
  'prompts-get-with-image': 'toolgate serves tools only, no prompts',
};

let plugins: LoadResult;
let everything: Everything;
let stack: Stack;
let proxy: Awaited<ReturnType<typeof startKeyProxy>>;
let out: string;

beforeAll(async () => {
  plugins = await loadPlugins([path.join(ROOT, 'test/fixtures')], quiet, {
    reserved: createToolRegistry()
      .list()
      .map((t) => t.name),
    env: {},
  });
  everything = await startEverything();
  stack = await startStack({
    tools: plugins.tools,
    config: {
      // The suite's own pages: any loopback origin (the proxy's port is not known yet).
      server: {
        port: 0,
        host: '127.0.0.1',
        allowedOrigins: ['http://127.0.0.1:*', 'http://localhost:*'],
      },
      // An upstream in the same stack: the suite lists and calls through a gateway that serves
      // its tools next to the fixture's (trust: auto; pinning has test/upstream-pinning.test.ts).
      policy: { http: { allowHosts: ['127.0.0.1'] } },
      upstreams: [{ id: 'everything', url: everything.url, trust: 'auto' }],
    },
  });
  proxy = await startKeyProxy(stack.url, KEYS.alice);
  out = await mkdtemp(path.join(tmpdir(), 'toolgate-conformance-'));
});

afterAll(async () => {
  await proxy?.close();
  await stack?.close();
  everything?.child.kill();
  if (out && !process.env.KEEP_CONFORMANCE) await rm(out, { recursive: true, force: true });
});

function conformance(...args: string[]): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve) => {
    execFile(
      CONFORMANCE,
      args,
      { cwd: out, timeout: 240_000, maxBuffer: 16 << 20 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout: stdout + stderr });
      },
    );
  });
}

interface Check {
  id: string;
  status: string;
  details?: { tools?: string[] };
}

/** checks.json of every scenario run: scenario → its checks. */
async function results(dir: string): Promise<Map<string, Check[]>> {
  const byScenario = new Map<string, Check[]>();
  for (const entry of await readdir(dir)) {
    const m = /^server-(.+)-\d{4}-\d{2}-\d{2}T.*$/.exec(entry) ?? /^(.+)$/.exec(entry);
    const checks = JSON.parse(
      await readFile(path.join(dir, entry, 'checks.json'), 'utf8').catch(() => '[]'),
    ) as Check[];
    byScenario.set(m![1]!, checks);
  }
  return byScenario;
}

describe('MCP conformance suite', () => {
  it('loads the fixture plugin', () => {
    expect(plugins.tools.map((t) => t.name)).toContain('test_simple_text');
  });

  it("serves the upstream's tools next to the fixture's, and calls one", async () => {
    const mcp = new Client({ name: 'test', version: '1' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${proxy.url}/mcp`)));
    try {
      const { tools } = await mcp.listTools();
      expect(tools.find((t) => t.name === 'everything__echo')?.inputSchema).toMatchObject({
        type: 'object',
        properties: { message: { type: 'string' } },
        required: ['message'],
      });
      expect(tools.map((t) => t.name)).toContain('test_simple_text');
      const echoed = await mcp.callTool({
        name: 'everything__echo',
        arguments: { message: 'conformance' },
      });
      expect(echoed.isError).toBeFalsy();
      expect(echoed.content).toEqual([{ type: 'text', text: 'Echo: conformance' }]);
    } finally {
      await mcp.close();
    }
  });

  it('passes every applicable server scenario', async () => {
    const dir = path.join(out, 'results');
    // `all`: the active suite and the pending scenarios (json-schema-2020-12, server-sse-polling).
    const run = await conformance(
      'server',
      '--url',
      `${proxy.url}/mcp`,
      '--suite',
      'all',
      '-o',
      dir,
    );
    const byScenario = await results(dir);
    const passed: string[] = [];
    const failed: string[] = [];
    for (const [scenario, checks] of byScenario) {
      const ok = checks.length > 0 && checks.every((c) => c.status !== 'FAILURE');
      (ok ? passed : failed).push(scenario);
    }
    // The CI log keeps the table docs/mcp.md reports.
    process.stdout.write(`conformance passed: ${passed.sort().join(', ')}\n`);
    process.stdout.write(`conformance failed: ${failed.sort().join(', ')}\n`);
    expect(byScenario.size, run.stdout).toBeGreaterThan(20);
    // The suite's listing had the upstream's tools in it (so its checks ran with them).
    const listed = byScenario.get('tools-list')?.find((c) => c.id === 'tools-list');
    expect(listed?.details?.tools).toEqual(
      expect.arrayContaining(['everything__echo', 'test_simple_text']),
    );
    expect(
      failed.filter((s) => !(s in NOT_APPLICABLE)),
      run.stdout,
    ).toEqual([]);
    // The ones this gateway is about: present and passed.
    expect(passed).toEqual(
      expect.arrayContaining([
        'server-initialize',
        'ping',
        'logging-set-level',
        'tools-list',
        'tools-call-simple-text',
        'tools-call-error',
        'tools-call-with-logging',
        'tools-call-with-progress',
        'dns-rebinding-protection',
        'json-schema-2020-12',
      ]),
    );
  }, 300_000);
});
