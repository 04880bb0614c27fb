// node --test plugins/examples/text_stats/plugin.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import plugin from './plugin.mjs';

const [tool] = plugin.tools;

test('counts', () => {
  assert.deepEqual(tool.handler({ text: "It's a test. Really!\n\nSecond paragraph, l'été" }), {
    characters: 45,
    words: 7,
    sentences: 3,
    lines: 3,
    paragraphs: 2,
    readingMinutes: 0,
  });
});

test('empty text', () => {
  assert.deepEqual(tool.handler({ text: '' }), {
    characters: 0,
    words: 0,
    sentences: 0,
    lines: 0,
    paragraphs: 0,
    readingMinutes: 0,
  });
});
