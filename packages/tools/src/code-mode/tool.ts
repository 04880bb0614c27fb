/**
 * run_code_with_tools: Python that calls the client's tools as functions (docs/code-mode.md).
 * Every nested call goes back through the gateway's pipeline as the script's client.
 */
import { Type, defineTool, type Tool } from '@toolgate/registry';
import { RunResultSchema } from '../sandboxed/run-code.js';
import { oneLine, pythonName } from './python-module.js';
import { runWithTools } from './script.js';

/** The listing's description: at most this many characters, whatever the client's tools. */
export const MAX_DESCRIPTION_CHARS = 4000;
const MAX_TIMEOUT_SECONDS = 300;

const BASE =
  'Run Python 3 in a throwaway sandbox where your tools are functions of the `toolgate` module ' +
  '(keyword arguments, results as Python values; a failed call raises toolgate.ToolError with ' +
  '.code and .message). Call many tools in one script and print only what matters: only ' +
  'stdout/stderr come back. toolgate.help("name") returns a tool\'s schema; toolgate.tools() ' +
  'lists them. No network except through the tools; /workspace is the persistent workspace.';

/** BASE plus one line per tool the client may call, cut at MAX_DESCRIPTION_CHARS. */
export function describeFor(visible: readonly Tool[]): string {
  const lines: string[] = [];
  let size = BASE.length + 12;
  const tools = visible.filter((t) => t.name !== 'run_code_with_tools');
  for (const [i, tool] of tools.entries()) {
    const line = `\n- ${pythonName(tool.name)}: ${oneLine(tool.description, 100)}`;
    if (size + line.length > MAX_DESCRIPTION_CHARS - 60) {
      lines.push(`\n… and ${tools.length - i} more (toolgate.tools())`);
      break;
    }
    lines.push(line);
    size += line.length;
  }
  return `${BASE}\nFunctions:${lines.join('')}`;
}

export const runCodeWithTools = defineTool({
  name: 'run_code_with_tools',
  description: BASE,
  describe: describeFor,
  category: 'code',
  parameters: Type.Object({
    code: Type.String({
      minLength: 1,
      maxLength: 200_000,
      description: 'Python source; `toolgate` is imported already',
    }),
    timeoutSeconds: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_TIMEOUT_SECONDS,
        description: 'Wall-clock limit in seconds for the whole script (default 30)',
      }),
    ),
  }),
  result: RunResultSchema,
  sandbox: { image: 'python' },
  risk: 'sensitive',
  timeoutMs: (MAX_TIMEOUT_SECONDS + 30) * 1000,
  handler: (args, ctx) => runWithTools(ctx, args.code, args.timeoutSeconds),
});
