import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEverything, type Everything } from './support/everything.js';
import { KEYS, startStack, type Stack } from './support/stack.js';

// The official MCP Inspector, headless (--cli), against a started gateway: what an IDE agent
// would see. npx fetches the pinned package from the npm registry (cached after the first run).
// The gateway also serves an upstream MCP server (the real server-everything, docs/upstreams.md).
const INSPECTOR = '@modelcontextprotocol/inspector@2.12.0';

let everything: Everything;
let stack: Stack;
beforeAll(async () => {
  everything = await startEverything();
  stack = await startStack({
    config: {
      policy: { http: { allowHosts: ['127.0.0.1'] } },
      // trust: auto; pinning has test/upstream-pinning.test.ts
      upstreams: [{ id: 'everything', url: everything.url, trust: 'auto' }],
    },
  });
}, 60_000);
afterAll(async () => {
  await stack?.close();
  everything?.child.kill();
});

function inspect(
  ...args: string[]
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'npx',
      [
        '-y',
        INSPECTOR,
        '--cli',
        `${stack.url}/mcp`,
        '--transport',
        'http',
        '--header',
        `Authorization: Bearer ${KEYS.alice}`,
        ...args,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, npm_config_yes: 'true' } },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('MCP Inspector CLI', () => {
  it('lists the tools (strict schema check) and calls calculator', async () => {
    const list = await inspect('--method', 'tools/list', '--strict');
    expect(list.code, list.stderr).toBe(0);
    const names = (JSON.parse(list.stdout) as { tools: { name: string }[] }).tools.map(
      (t) => t.name,
    );
    expect(names).toEqual(
      expect.arrayContaining(['calculator', 'current_time', 'run_python', 'find_tools']),
    );

    const call = await inspect(
      '--method',
      'tools/call',
      '--tool-name',
      'calculator',
      '--tool-arg',
      'expression=2*(3+4)',
    );
    expect(call.code, call.stderr).toBe(0);
    expect(JSON.parse(call.stdout)).toMatchObject({ content: [{ type: 'text', text: '14' }] });
  }, 240_000);

  it("lists an upstream's tools with their schemas and calls its echo through toolgate", async () => {
    const list = await inspect('--method', 'tools/list', '--strict');
    expect(list.code, list.stderr).toBe(0);
    const tools = (
      JSON.parse(list.stdout) as { tools: { name: string; inputSchema: Record<string, unknown> }[] }
    ).tools;
    expect(tools.find((t) => t.name === 'everything__echo')?.inputSchema).toMatchObject({
      type: 'object',
      properties: { message: { type: 'string' } },
      required: ['message'],
    });
    expect(tools.map((t) => t.name)).toEqual(
      expect.arrayContaining(['everything__get-sum', 'calculator']),
    );

    const call = await inspect(
      '--method',
      'tools/call',
      '--tool-name',
      'everything__echo',
      '--tool-arg',
      'message=hello from the inspector',
    );
    expect(call.code, call.stderr).toBe(0);
    expect(JSON.parse(call.stdout)).toMatchObject({
      content: [{ type: 'text', text: 'Echo: hello from the inspector' }],
    });
  }, 240_000);
});
