/**
 * Code mode with OpenAI: node examples/code-mode.ts "Fetch https://example.com/a … /t and tell me which is longest"
 * The model gets one tool, run_code_with_tools: it writes a Python script that calls your other
 * tools as `toolgate.<name>(…)` functions and prints only what matters, so twenty results never
 * pass through its context (docs/code-mode.md). Every nested call still goes through toolgate's
 * policy: scope, approvals, rate limit, audit.
 * Env: TOOLGATE_URL, TOOLGATE_KEY, OPENAI_API_KEY, OPENAI_MODEL (default gpt-4.1-mini).
 */
import OpenAI from 'openai';
import { runOpenAIChat } from './lib/openai-loop.ts';
import { toolgateFromEnv } from './lib/toolgate.ts';

export const CODE_MODE_SYSTEM =
  'You solve tasks by writing one Python script for the run_code_with_tools tool. Your other ' +
  'tools are functions of the `toolgate` module in that script (see the tool description). ' +
  'Do the work in the script and print only a short answer.';

const prompt =
  process.argv.slice(2).join(' ') || 'Add up the square roots of 1 to 20 using the calculator.';
const answer = await runOpenAIChat(new OpenAI(), {
  toolgate: toolgateFromEnv(),
  model: process.env.OPENAI_MODEL ?? 'gpt-4.1-mini',
  system: CODE_MODE_SYSTEM,
  prompt,
  only: ['run_code_with_tools'],
  onToolResult: (name, _args, result) => console.log(`→ ${name}: ${result}`),
});
console.log(answer);
