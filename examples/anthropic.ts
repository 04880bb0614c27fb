/**
 * toolgate with Claude: node examples/anthropic.ts "What is 2**32 / 7, and what time is it in Tokyo?"
 * A long run_python shows its output live; Ctrl-C cancels it (e.g. "Use run_python to count to
 * 20, one number a second").
 * Env: TOOLGATE_URL, TOOLGATE_KEY, ANTHROPIC_API_KEY, ANTHROPIC_MODEL (default claude-sonnet-4-5).
 */
import Anthropic from '@anthropic-ai/sdk';
import { runAnthropic } from './lib/anthropic-loop.ts';
import { liveOnTerminal } from './lib/live.ts';
import { toolgateFromEnv } from './lib/toolgate.ts';

const prompt =
  process.argv.slice(2).join(' ') || 'What is 2**32 / 7, and what time is it in Tokyo?';
const answer = await runAnthropic(new Anthropic(), {
  toolgate: toolgateFromEnv(),
  model: process.env.ANTHROPIC_MODEL ?? 'claude-sonnet-4-5',
  prompt,
  // Long calls (run_python, run_shell) print their output as it comes; Ctrl-C cancels them.
  live: liveOnTerminal(),
  onToolResult: (name, input, result) =>
    console.log(`→ ${name}(${JSON.stringify(input)}) = ${result}`),
});
console.log(answer);
