// Type-level: a tool's declared result schema types its handler's return, as parameters type
// its arguments; tools without one stay as they were (plugins, examples).
import { defineTool as pluginDefineTool } from '@toolgate/plugins';
import { Type, defineTool, type HandlerResult, type Static } from '@toolgate/registry';
import { describe, expectTypeOf, it } from 'vitest';

const Params = Type.Object({ path: Type.String() });
const Result = Type.Object({
  path: Type.String(),
  encoding: Type.Union([Type.Literal('utf-8'), Type.Literal('base64')]),
  tags: Type.Array(Type.String()),
  truncated: Type.Optional(Type.Boolean()),
});

describe('defineTool with a result schema', () => {
  it('accepts a handler returning the declared shape, sync or async, literals kept', () => {
    const sync = defineTool({
      name: 'ok_sync',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Result,
      handler: ({ path }) => ({ path, encoding: 'utf-8', tags: [path] }),
    });
    const async = defineTool({
      name: 'ok_async',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Result,
      handler: async ({ path }) => {
        await Promise.resolve();
        return { path, encoding: 'base64', tags: [], truncated: true };
      },
    });
    const typed = defineTool({
      name: 'ok_typed',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Result,
      handler: (): Promise<Static<typeof Result>> =>
        Promise.resolve({ path: 'a', encoding: 'utf-8', tags: [] }),
    });
    expectTypeOf(sync.result).toEqualTypeOf<typeof Result | undefined>();
    expectTypeOf(async.handler).returns.not.toBeAny();
    expectTypeOf(typed.handler).returns.not.toBeAny();
  });

  it('refuses a handler whose result does not fit the schema', () => {
    defineTool({
      name: 'missing_field',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Result,
      // @ts-expect-error `encoding` and `tags` are required by the result schema
      handler: ({ path }) => ({ path }),
    });
    defineTool({
      name: 'wrong_literal',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Result,
      // @ts-expect-error 'latin1' is not one of the schema's encodings
      handler: ({ path }) => ({ path, encoding: 'latin1', tags: [] }),
    });
    defineTool({
      name: 'wrong_async',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Result,
      // @ts-expect-error an async handler is held to the same shape
      handler: async ({ path }) => {
        await Promise.resolve();
        return { path, encoding: 'utf-8', tags: [1, 2] };
      },
    });
    defineTool({
      name: 'not_an_object',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Result,
      // @ts-expect-error a number where the schema says object
      handler: () => 42,
    });
  });

  it('takes a non-object result schema too, and holds the handler to it', () => {
    defineTool({
      name: 'number_result',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Type.Number(),
      handler: () => 42,
    });
    defineTool({
      name: 'string_for_number',
      description: 'd',
      category: 'c',
      parameters: Params,
      result: Type.Number(),
      // @ts-expect-error a string where the schema says number
      handler: () => 'x',
    });
  });

  it('leaves tools without a result schema as they were: any return type', () => {
    const plain = defineTool({
      name: 'plain',
      description: 'd',
      category: 'c',
      parameters: Type.Object({ a: Type.Number(), b: Type.Number() }),
      handler: ({ a, b }) => a + b,
    });
    expectTypeOf(plain.handler).returns.toEqualTypeOf<number | Promise<number>>();
    expectTypeOf<HandlerResult<undefined>>().toBeUnknown();
  });

  it('is what @toolgate/plugins hands TypeScript plugins', () => {
    expectTypeOf(pluginDefineTool).toEqualTypeOf(defineTool);
  });
});
