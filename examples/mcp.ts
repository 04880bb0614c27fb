/**
 * A long run_python over MCP, its output live, Ctrl-C cancels it:
 *   node examples/mcp.ts            (TOOLGATE_URL, TOOLGATE_KEY)
 * No model needed: this is what an MCP host (an IDE agent, a desktop assistant) does when its
 * model calls a toolgate tool.
 */
import { callOverMcp } from './lib/mcp-call.ts';
import { toolgateFromEnv } from './lib/toolgate.ts';

const code =
  process.argv[2] ??
  'import time\nfor i in range(1, 21):\n    print(f"step {i} of 20", flush=True)\n    time.sleep(1)\nprint("done")';
const stop = new AbortController();
process.on('SIGINT', () => {
  if (stop.signal.aborted) process.exit(130);
  process.stderr.write('\n[cancelling: toolgate stops the sandbox]\n');
  stop.abort();
});
const result = await callOverMcp(
  toolgateFromEnv(),
  'run_python',
  { code },
  {
    onOutput: (level, text) => process.stderr.write(`  run_python ${level} │ ${text}\n`),
    onProgress: (progress, total) =>
      process.stderr.write(`  progress ${progress}${total ? ` / ${total}` : ''}\r`),
    signal: stop.signal,
  },
);
console.log(result.cancelled ? 'cancelled' : result.text);
