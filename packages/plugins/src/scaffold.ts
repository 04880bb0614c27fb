/** `toolgate plugin new <name>`: writes a working plugin, its test and a README. */
import { mkdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Folder and plugin names: lower case, digits, `_` and `-`; the tool takes the `_` form. */
export const PLUGIN_NAME = /^[a-z][a-z0-9_-]{0,62}[a-z0-9]$/;

export interface ScaffoldOptions {
  name: string;
  /** Plugins directory (default "plugins"), relative to `cwd`. */
  dir?: string;
  cwd?: string;
  /** Overwrite an existing plugin folder's files. */
  force?: boolean;
}

export class ScaffoldError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ScaffoldError';
  }
}

export async function scaffoldPlugin(
  options: ScaffoldOptions,
): Promise<{ dir: string; files: string[]; tool: string }> {
  const { name } = options;
  if (!PLUGIN_NAME.test(name)) {
    throw new ScaffoldError(
      `"${name}" is not a valid plugin name: use 2-64 lower-case letters, digits, "_" or "-", starting with a letter`,
    );
  }
  const tool = name.replace(/-/g, '_');
  const dir = path.resolve(options.cwd ?? process.cwd(), options.dir ?? 'plugins', name);
  if (
    !options.force &&
    (await stat(dir).then(
      () => true,
      () => false,
    ))
  ) {
    throw new ScaffoldError(`${dir} already exists (use --force to overwrite its files)`);
  }
  await mkdir(dir, { recursive: true });
  const files = {
    'plugin.mjs': pluginTemplate(name, tool),
    'plugin.test.mjs': testTemplate(tool),
    'README.md': readmeTemplate(name, tool, path.relative(options.cwd ?? process.cwd(), dir)),
  };
  for (const [file, text] of Object.entries(files)) {
    await writeFile(path.join(dir, file), text);
  }
  return { dir, files: Object.keys(files), tool };
}

function pluginTemplate(name: string, tool: string): string {
  return `// ${name}: a toolgate plugin. toolgate imports every <plugins dir>/*/plugin.mjs when the
// gateway and the worker start; restart both after editing. See README.md.

/**
 * A plugin default-exports { name, tools } or, as here, a function that receives what it needs
 * from toolgate: { env, logger, dir, ToolError, Type }. Nothing has to be imported, so the
 * plugin works from any folder.
 */
export default function plugin({ ToolError, env }) {
  const greeting = env.${tool.toUpperCase()}_GREETING ?? 'Hello';
  return {
    name: '${name}',
    tools: [
      {
        name: '${tool}',
        // What the model reads to decide when to call the tool: say what it does and returns.
        description: 'Greets someone by name. Returns { message }.',
        category: 'custom',
        // JSON Schema of the arguments. Unknown properties are refused; nothing is coerced.
        parameters: {
          type: 'object',
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 100, description: 'Who to greet' },
          },
          required: ['name'],
        },
        // Optional: JSON Schema of what the handler returns (an object). MCP clients get it as
        // the tool's outputSchema; the worker counts results that do not match it.
        result: {
          type: 'object',
          properties: { message: { type: 'string' } },
          required: ['message'],
          additionalProperties: false,
        },
        timeoutMs: 5000,
        // Optional: cacheTtlSeconds: 60 caches results per arguments; risk: 'destructive'
        // makes every call wait for an admin's approval.
        // _ctx: { callId, clientId, signal (aborted at the timeout), services }
        handler: async ({ name }, _ctx) => {
          if (name.toLowerCase() === 'nobody') {
            // A ToolError reaches the model as { code, message } so it can try again.
            throw new ToolError('invalid_name', 'give the name of somebody to greet');
          }
          return { message: \`\${greeting}, \${name}!\` };
        },
      },
    ],
  };
}
`;
}

function testTemplate(tool: string): string {
  return `// Run with: node --test ${'<plugins dir>'}/*/plugin.test.mjs  (no dependencies needed)
/* global AbortSignal -- Node's globals */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import plugin from './plugin.mjs';

// Stand-ins for what toolgate hands the plugin and each call.
class ToolError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'ToolError';
    this.code = code;
  }
}
const logger = { debug() {}, info() {}, warn() {}, error() {} };
const loaded = await plugin({ env: {}, logger, dir: import.meta.dirname, ToolError });
const tool = loaded.tools.find((t) => t.name === '${tool}');
const ctx = () => ({
  callId: 'test',
  clientId: 'test',
  signal: AbortSignal.timeout(5000),
  services: {},
});

test('declares the tool', () => {
  assert.ok(tool, 'the plugin exports ${tool}');
  assert.equal(tool.parameters.type, 'object');
  assert.ok(tool.description.length > 10);
});

test('answers', async () => {
  assert.deepEqual(await tool.handler({ name: 'Ada' }, ctx()), { message: 'Hello, Ada!' });
});

test('fails with a code the model can read', async () => {
  await assert.rejects(tool.handler({ name: 'nobody' }, ctx()), { code: 'invalid_name' });
});
`;
}

function readmeTemplate(name: string, tool: string, rel: string): string {
  return `# ${name}

A toolgate plugin providing the \`${tool}\` tool.

- \`plugin.mjs\` — the plugin: its tools, each a name, a description for the model, a JSON
  Schema for the arguments and a handler.
- \`plugin.test.mjs\` — its tests: \`node --test ${rel}/plugin.test.mjs\`.

toolgate loads every \`<dir>/*/plugin.mjs\` of the directories in \`plugins.dirs\` of its
config (default \`./plugins\`) when the gateway and the worker start. A plugin that fails to
load is logged and skipped. After editing, restart both services and check:

\`\`\`sh
curl -s -H "Authorization: Bearer $TOOLGATE_KEY" "http://127.0.0.1:8080/tools?q=${tool}"
curl -s -H "Authorization: Bearer $TOOLGATE_KEY" -H 'content-type: application/json' \\
  -d '{"name":"Ada"}' http://127.0.0.1:8080/tools/${tool}/execute
\`\`\`

Settings come from the environment (\`env\` in the plugin function), e.g.
\`${tool.toUpperCase()}_GREETING=Hi\`.
`;
}
