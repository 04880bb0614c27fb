import { describe, expect, it } from 'vitest';
import { parseSse } from './sse.js';
import { toArgs } from './components/schema-form.js';

describe('parseSse', () => {
  it('splits events, skips comments and keeps an unfinished tail', () => {
    const { messages, rest } = parseSse(
      ': keep-alive\n\nevent: parked\ndata: {"a":1}\n\nid: 3\nevent: output\ndata: x\ndata: y\n\nevent: dec',
    );
    expect(messages).toEqual([
      { event: 'parked', data: '{"a":1}' },
      { event: 'output', data: 'x\ny', id: '3' },
    ]);
    expect(rest).toBe('event: dec');
  });

  it('reads CRLF streams', () => {
    expect(parseSse('event: a\r\ndata: 1\r\n\r\n').messages).toEqual([{ event: 'a', data: '1' }]);
  });
});

describe('toArgs (the Tools form)', () => {
  const schema = {
    type: 'object',
    properties: {
      expression: { type: 'string' },
      n: { type: 'integer' },
      x: { type: 'number' },
      flag: { type: 'boolean' },
      mode: { anyOf: [{ const: 'a' }, { const: 'b' }] },
      tags: { type: 'array', items: { type: 'string' } },
      opts: { type: 'object' },
    },
  };

  it('turns field texts into typed arguments, leaving empty fields out', () => {
    expect(
      toArgs(schema, {
        expression: '2+2',
        n: '3',
        x: '0.5',
        flag: true,
        mode: 'b',
        tags: 'one\ntwo\n',
        opts: '{"k":[1]}',
      }),
    ).toEqual({
      args: {
        expression: '2+2',
        n: 3,
        x: 0.5,
        flag: true,
        mode: 'b',
        tags: ['one', 'two'],
        opts: { k: [1] },
      },
    });
    expect(toArgs(schema, { expression: '' })).toEqual({ args: {} });
  });

  it('names the field that does not parse', () => {
    expect(toArgs(schema, { n: '1.5' })).toEqual({ field: 'n', message: 'n: not an integer' });
    expect(toArgs(schema, { opts: '{' })).toEqual({
      field: 'opts',
      message: 'opts: not valid JSON',
    });
  });
});
