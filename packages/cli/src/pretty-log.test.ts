/** `toolgate up` on a terminal: a service's pino JSON line becomes one readable line. */
import { describe, expect, it } from 'vitest';
import { formatLogLine, type Palette } from './pretty-log.js';

const plain = (t: string) => t;
const none: Palette = {
  bold: plain,
  dim: plain,
  red: plain,
  green: plain,
  yellow: plain,
  blue: plain,
  magenta: plain,
  cyan: plain,
};
const time = Date.UTC(2026, 11, 1, 7, 44, 16, 403);

describe('formatLogLine', () => {
  it('time, service, level, [component] message, then the other fields', () => {
    const line = JSON.stringify({
      level: 30,
      time,
      pid: 1,
      hostname: 'h',
      name: 'toolgate-gateway',
      component: 'gateway',
      msg: 'gateway listening',
      host: '127.0.0.1',
      port: 8080,
      tools: ['a', 'b'],
      note: 'two words',
    });
    expect(formatLogLine('gateway', plain, line, none)).toBe(
      '07:44:16.403 gateway  INFO  [gateway] gateway listening host=127.0.0.1 port=8080 tools=["a","b"] note="two words"',
    );
  });

  it('an error: its level, and its stack indented below', () => {
    const line = JSON.stringify({
      level: 50,
      time,
      msg: 'failed to start',
      err: { type: 'Error', message: 'boom', stack: 'Error: boom\n    at x (y.ts:1:1)' },
    });
    expect(formatLogLine('worker', plain, line, none).split('\n')).toEqual([
      '07:44:16.403 worker   ERROR failed to start',
      '    Error: boom',
      '        at x (y.ts:1:1)',
    ]);
  });

  it('colours the service and the level on a terminal; keeps lines that are not JSON', () => {
    const red = (t: string) => `\x1b[31m${t}\x1b[0m`;
    const coloured = formatLogLine('gateway', red, '{"level":40,"time":0,"msg":"slow"}', {
      ...none,
      yellow: (t) => `<y>${t}</y>`,
    });
    expect(coloured).toContain('\x1b[31mgateway \x1b[0m');
    expect(coloured).toContain('<y>WARN </y> slow');
    expect(formatLogLine('gateway', plain, '  Point your assistant at: x', none)).toBe(
      '             gateway    Point your assistant at: x',
    );
  });
});
