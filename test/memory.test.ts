/** memory_* and find_tools through the whole stack: HTTP → queue → worker → Redis. */
import { randomUUID } from 'node:crypto';
import { Keys } from '@toolgate/calls';
import type { ToolServices } from '@toolgate/registry';
import { createToolRegistry } from '@toolgate/tools';
import { createMemoryStore, memoryTools } from '@toolgate/tools/memory';
import { createToolCatalog, metaTools } from '@toolgate/tools/meta';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KEYS, startStack, type Stack } from './support/stack.js';

// Registered here until createToolRegistry() includes them; then they are already there.
const builtin = createToolRegistry();
const extra = [...memoryTools, ...metaTools].filter((t) => !builtin.get(t.name));

const clients = [
  { id: 'alice', key: KEYS.alice, tools: ['*'] },
  { id: 'bob', key: KEYS.bob, tools: ['category:memory', 'category:meta', 'category:math'] },
];

let stack: Stack;
let redis: Redis;

beforeAll(async () => {
  const url = inject('redisUrl');
  const prefix = `tmem${randomUUID().slice(0, 8)}`;
  redis = new Redis(url);
  // As services/worker/src/main.ts is to wire them (the sandbox is not needed here).
  const services: Partial<ToolServices> = {
    memory: createMemoryStore(redis, { keys: new Keys(prefix) }),
    toolCatalog: createToolCatalog(createToolRegistry(extra), clients),
  };
  stack = await startStack({
    tools: extra,
    services: services as ToolServices,
    config: { clients, redis: { url, prefix } },
  });
});
afterAll(async () => {
  await stack?.close();
  redis?.disconnect();
});

interface Body {
  status: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a tool's result, read by each test
  result: any;
  error: { code: string; message: string };
}

const execute = async (tool: string, args: unknown, key: string = KEYS.alice) => {
  const res = await stack.call(`/tools/${tool}/execute`, { json: args, key });
  return { status: res.status, body: (await res.json()) as Body };
};

describe('memory through the gateway', () => {
  it('saves, then finds with a typo; another client sees none of it', async () => {
    const saved = await execute('memory_save', {
      text: 'Deploys to production happen on Thursdays after the standup',
      tags: ['release-process'],
    });
    expect(saved).toMatchObject({
      status: 200,
      body: { status: 'ok', result: { id: expect.any(String), entries: 1 } },
    });
    const found = await execute('memory_search', { query: 'deploy thursdy' });
    expect(found.body.result.results[0]).toMatchObject({
      id: saved.body.result.id,
      text: 'Deploys to production happen on Thursdays after the standup',
      tags: ['release-process'],
    });
    const asBob = await execute('memory_search', { query: 'deploy thursday' }, KEYS.bob);
    expect(asBob.body).toMatchObject({ status: 'ok', result: { results: [] } });
  });

  it('oversized text is refused before it is queued', async () => {
    const { status, body } = await execute('memory_save', { text: 'x'.repeat(5000) });
    expect(status).toBe(400);
    expect(body.error.code).toBe('invalid_arguments');
  });
});

describe('find_tools through the gateway', () => {
  it("ranks only the calling client's tools", async () => {
    const alice = await execute('find_tools', { query: 'current time in a timezone' });
    expect(alice.body.result.tools[0]).toMatchObject({
      name: 'current_time',
      parameters: expect.objectContaining({ type: 'object' }),
    });
    const bob = await execute('find_tools', { query: 'current time in a timezone' }, KEYS.bob);
    expect(bob.body.result.tools.map((t: { name: string }) => t.name)).not.toContain(
      'current_time',
    );
    const math = await execute('find_tools', { query: 'calculate arithmetic' }, KEYS.bob);
    expect(math.body.result.tools[0]?.name).toBe('calculator');
  });
});
