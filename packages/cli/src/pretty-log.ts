/**
 * Readable log lines for `toolgate up` on a terminal: the services write pino JSON lines, which
 * a newcomer should not have to read. time, service, level, message, then the other fields.
 */
type Paint = (text: string) => string;

export interface Palette {
  bold: Paint;
  dim: Paint;
  red: Paint;
  green: Paint;
  yellow: Paint;
  blue: Paint;
  magenta: Paint;
  cyan: Paint;
}

const LEVELS: Record<number, [string, keyof Palette]> = {
  10: ['TRACE', 'dim'],
  20: ['DEBUG', 'blue'],
  30: ['INFO', 'green'],
  40: ['WARN', 'yellow'],
  50: ['ERROR', 'red'],
  60: ['FATAL', 'red'],
};

/** pino's own fields, shown in the line's head or not at all. */
const HEAD = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg', 'v', 'component', 'err']);

function value(v: unknown): string {
  if (typeof v === 'string') return /[\s"=]/.test(v) || v === '' ? JSON.stringify(v) : v;
  return JSON.stringify(v);
}

/**
 * One line of a service's output, for the terminal. A JSON log record becomes
 * `12:00:01.234 gateway  INFO  [component] message key=value …` (an error's stack indented
 * below); anything else (the development banner) is kept as it is, after the service name.
 */
export function formatLogLine(
  service: string,
  paintService: Paint,
  line: string,
  p: Palette,
): string {
  const name = paintService(service.padEnd(8));
  let record: Record<string, unknown> | undefined;
  if (line.startsWith('{')) {
    try {
      const parsed: unknown = JSON.parse(line);
      if (typeof parsed === 'object' && parsed !== null && 'level' in parsed)
        record = parsed as Record<string, unknown>;
    } catch {
      // not a log record
    }
  }
  if (!record) return `${p.dim('            ')} ${name} ${line}`;
  const time = new Date(typeof record.time === 'number' ? record.time : Date.now())
    .toISOString()
    .slice(11, 23);
  const [label, colour] = LEVELS[record.level as number] ?? ['LOG', 'dim'];
  const component =
    typeof record.component === 'string' ? `${p.dim(`[${record.component}]`)} ` : '';
  const fields = Object.entries(record)
    .filter(([k]) => !HEAD.has(k))
    .map(([k, v]) => `${p.dim(`${k}=`)}${value(v)}`)
    .join(' ');
  let text = `${p.dim(time)} ${name} ${p[colour](label.padEnd(5))} ${component}${String(record.msg ?? '')}${fields ? ` ${fields}` : ''}`;
  const err = record.err as { message?: string; stack?: string } | undefined;
  if (err) {
    const stack = err.stack ?? err.message ?? JSON.stringify(err);
    text += `\n${stack
      .split('\n')
      .map((l) => `    ${p.red(l)}`)
      .join('\n')}`;
  }
  return text;
}
