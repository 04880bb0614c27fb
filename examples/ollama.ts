/**
 * toolgate with a local model through Ollama's OpenAI-compatible endpoint (any other
 * OpenAI-compatible server works the same way):
 *   ollama pull qwen2.5 && node examples/ollama.ts "What is 17% of 2340?"
 * Env: TOOLGATE_URL, TOOLGATE_KEY, OLLAMA_BASE_URL (default http://127.0.0.1:11434/v1),
 * OLLAMA_MODEL (default qwen2.5; it must support tool calling).
 */
import OpenAI from 'openai';
import { runOpenAIChat } from './lib/openai-loop.ts';
import { toolgateFromEnv } from './lib/toolgate.ts';

const ollama = new OpenAI({
  baseURL: process.env.OLLAMA_BASE_URL ?? 'http://127.0.0.1:11434/v1',
  apiKey: 'ollama', // required by the SDK, ignored by Ollama
});
const prompt = process.argv.slice(2).join(' ') || 'What is 17% of 2340?';
const answer = await runOpenAIChat(ollama, {
  toolgate: toolgateFromEnv(),
  model: process.env.OLLAMA_MODEL ?? 'qwen2.5',
  prompt,
  // Small local models do better with a nudge to use the tools.
  system: 'Use the tools for arithmetic, dates and anything you cannot know. Answer briefly.',
  onToolResult: (name, args, result) => console.log(`→ ${name}(${args}) = ${result}`),
});
console.log(answer);
