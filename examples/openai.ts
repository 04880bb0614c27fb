/**
 * toolgate with OpenAI: node examples/openai.ts "What is 2**32 / 7, and what time is it in Tokyo?"
 * A long run_python shows its output live; Ctrl-C cancels it (e.g. "Use run_python to count to
 * 20, one number a second").
 * Env: TOOLGATE_URL, TOOLGATE_KEY, OPENAI_API_KEY, OPENAI_MODEL (default gpt-4.1-mini).
 */
import OpenAI from 'openai';
import { runOpenAIChat } from './lib/openai-loop.ts';
import { liveOnTerminal } from './lib/live.ts';
import { toolgateFromEnv } from './lib/toolgate.ts';

const prompt =
  process.argv.slice(2).join(' ') || 'What is 2**32 / 7, and what time is it in Tokyo?';
const answer = await runOpenAIChat(new OpenAI(), {
  toolgate: toolgateFromEnv(),
  model: process.env.OPENAI_MODEL ?? 'gpt-4.1-mini',
  prompt,
  // Long calls (run_python, run_shell) print their output as it comes; Ctrl-C cancels them.
  live: liveOnTerminal(),
  onToolResult: (name, args, result) => console.log(`→ ${name}(${args}) = ${result}`),
});
console.log(answer);
