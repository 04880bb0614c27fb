import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

// The official MCP Inspector, headless (--cli), against a started gateway: what an IDE agent
// would see. npx fetches the pinned package from the npm registry (cached after the first run).
const INSPECTOR = '@modelcontextprotocol/inspector@2.12.0';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
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
});
