import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

describe('execute', () => {
  it('runs calculator through the queue and the worker', async () => {
    const res = await stack.call('/tools/calculator/execute', { json: { expression: '2*(3+4)' } });
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body).toMatchObject({ tool: 'calculator', status: 'ok', result: 14, cached: false });
    expect(typeof body.id).toBe('string');
    expect(typeof body.durationMs).toBe('number');
  });
});
