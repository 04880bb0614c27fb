/**
 * How commands print what the gateway answered: a table for people (cli-table3, borderless, in
 * the style of `kubectl get`), JSON or YAML for scripts. `-o` picks; a terminal defaults to table.
 */
import Table from 'cli-table3';
import { stringify } from 'yaml';
import { UsageError, colours, type CliIo, type Parsed } from '../command.js';

export type OutputFormat = 'table' | 'json' | 'yaml';

const FORMATS: readonly OutputFormat[] = ['table', 'json', 'yaml'];

export type Colours = ReturnType<typeof colours>;

/** One column of a table: its header and how a row shows in it (JSON/YAML print rows whole). */
export interface Column<T> {
  header: string;
  value: (row: T) => string;
  /** Colours the cell (status in green/red…); only on a terminal without NO_COLOR. */
  colour?: (text: string, row: T, c: Colours) => string;
}

export function outputFormat(parsed: Parsed, io: Pick<CliIo, 'isTTY'>): OutputFormat {
  const given = parsed.values.output;
  if (given === undefined) return io.isTTY ? 'table' : 'json';
  if (typeof given === 'string' && (FORMATS as readonly string[]).includes(given))
    return given as OutputFormat;
  throw new UsageError(`toolgate: -o/--output must be table, json or yaml, got "${String(given)}"`);
}

// No borders, two spaces between columns, no padding: `kubectl get`'s look.
const BORDERLESS = {
  chars: {
    top: '',
    'top-mid': '',
    'top-left': '',
    'top-right': '',
    bottom: '',
    'bottom-mid': '',
    'bottom-left': '',
    'bottom-right': '',
    left: '',
    'left-mid': '',
    mid: '',
    'mid-mid': '',
    right: '',
    'right-mid': '',
    middle: '  ',
  },
  // cli-table3 colours headers red by default; colours are ours to choose (and NO_COLOR's to stop).
  style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 },
};

function cells<T>(io: Pick<CliIo, 'isTTY' | 'env'>, columns: readonly Column<T>[], row: T) {
  const c = colours(io);
  return columns.map((col) => {
    const text = col.value(row);
    return col.colour && c.on ? col.colour(text, row, c) : text;
  });
}

function lines(table: Table.Table): string {
  return `${table
    .toString()
    .split('\n')
    .map((line) => line.trimEnd())
    .join('\n')}\n`;
}

function headers<T>(io: Pick<CliIo, 'isTTY' | 'env'>, columns: readonly Column<T>[]) {
  const c = colours(io);
  return columns.map((col) => c.bold(col.header));
}

/** Prints rows: a table (header and one line a row), a JSON array, or a YAML list. */
export function render<T>(
  io: CliIo,
  format: OutputFormat,
  rows: readonly T[],
  columns: readonly Column<T>[],
): void {
  if (format === 'json') return io.out(`${JSON.stringify(rows, null, 2)}\n`);
  if (format === 'yaml') return io.out(stringify(rows));
  const table = new Table({ ...BORDERLESS, head: headers(io, columns) });
  for (const row of rows) table.push(cells(io, columns, row));
  io.out(lines(table));
}

/** Prints one record (`calls show`): JSON or YAML whole, a table as `FIELD  value` lines. */
export function renderOne<T>(
  io: CliIo,
  format: OutputFormat,
  record: T,
  fields: readonly Column<T>[],
): void {
  if (format === 'json') return io.out(`${JSON.stringify(record, null, 2)}\n`);
  if (format === 'yaml') return io.out(stringify(record));
  const c = colours(io);
  const table = new Table(BORDERLESS);
  for (const field of fields) {
    const text = field.value(record);
    if (text === '') continue;
    table.push([c.bold(field.header), field.colour && c.on ? field.colour(text, record, c) : text]);
  }
  io.out(lines(table));
}

export interface Follower<T> {
  /** Prints rows as they come: the header once before the first, then one line each. */
  push(rows: readonly T[]): void;
}

/**
 * Output for `--follow` (`kubectl get -w`): a table prints its header once and a line per row,
 * each column as wide as the widest seen so far (a wider value widens its column from then on);
 * JSON prints one object per line (NDJSON), YAML one document per row.
 */
export function follower<T>(
  io: CliIo,
  format: OutputFormat,
  columns: readonly Column<T>[],
): Follower<T> {
  const widths = columns.map((col) => col.header.length);
  let headed = false;
  return {
    push(rows) {
      if (format === 'json') {
        for (const row of rows) io.out(`${JSON.stringify(row)}\n`);
        return;
      }
      if (format === 'yaml') {
        for (const row of rows) io.out(`---\n${stringify(row)}`);
        return;
      }
      if (rows.length === 0 && headed) return;
      for (const row of rows)
        columns.forEach((col, i) => {
          widths[i] = Math.max(widths[i]!, col.value(row).length);
        });
      const table = new Table({ ...BORDERLESS, colWidths: [...widths] });
      if (!headed) table.push(headers(io, columns));
      headed = true;
      for (const row of rows) table.push(cells(io, columns, row));
      if (table.length > 0) io.out(lines(table));
    },
  };
}
