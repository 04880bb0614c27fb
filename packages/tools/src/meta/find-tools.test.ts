import { ToolRegistry, Type, defineTool, type ToolContext } from '@toolgate/registry';
import { describe, expect, it } from 'vitest';
import { createToolCatalog, findTools } from './index.js';

const tool = (name: string, description: string, category: string) =>
  defineTool({ name, description, category, parameters: Type.Object({}), handler: () => null });

function registry() {
  const r = new ToolRegistry();
  r.registerAll([
    tool('get_weather', 'Current weather and forecast for a city', 'web'),
    tool('read_csv', 'Read a CSV spreadsheet file and return its rows', 'files'),
    tool('add_numbers', 'Add two numbers', 'math'),
    findTools,
  ]);
  return r;
}

const clients = [
  { id: 'all', tools: ['*'] },
  { id: 'mathy', tools: ['category:math', 'find_tools'] },
];

const ctx = (clientId: string, catalog = createToolCatalog(registry(), clients)): ToolContext => ({
  callId: 'c',
  clientId,
  signal: new AbortController().signal,
  services: { toolCatalog: catalog },
});

describe('find_tools', () => {
  it('ranks the registry for a query, typos included, and returns the parameters', async () => {
    const { tools } = await findTools.handler({ query: 'wether forcast' }, ctx('all'));
    expect(tools[0]).toEqual({
      name: 'get_weather',
      description: 'Current weather and forecast for a city',
      category: 'web',
      parameters: { type: 'object', properties: {}, additionalProperties: false },
    });
    expect((await findTools.handler({ query: 'spreadsheet' }, ctx('all'))).tools[0]?.name).toBe(
      'read_csv',
    );
  });

  it("shows only the calling client's tools, never itself", async () => {
    expect((await findTools.handler({ query: 'weather' }, ctx('mathy'))).tools).toEqual([]);
    expect(
      (await findTools.handler({ query: 'add numbers' }, ctx('mathy'))).tools.map((t) => t.name),
    ).toEqual(['add_numbers']);
    expect((await findTools.handler({ query: 'tools find' }, ctx('all'))).tools).toEqual([]);
    expect((await findTools.handler({ query: 'weather' }, ctx('stranger'))).tools).toEqual([]);
  });

  it('in development mode (no clients configured) every caller sees every tool', async () => {
    const dev = createToolCatalog(registry(), []);
    expect((await findTools.handler({ query: 'csv' }, ctx('dev', dev))).tools).toHaveLength(1);
  });

  it('honours limit', async () => {
    const { tools } = await findTools.handler({ query: 'a', limit: 1 }, ctx('all'));
    expect(tools.length).toBeLessThanOrEqual(1);
  });
});
