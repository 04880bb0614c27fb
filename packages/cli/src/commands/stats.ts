/** `toolgate stats`: per tool calls, errors, latency and the cache, as GET /v1/stats reports them. */
import type { StatsReport, ToolStats } from '@toolgate/calls';
import type { Command } from '../command.js';
import {
  GATEWAY_HELP,
  GATEWAY_OPTIONS,
  apiOk,
  gatewayOf,
  outputFormat,
  render,
  renderOne,
  type Column,
} from '../remote/index.js';
import { duration } from './when.js';

const percent = (rate: number) => `${(rate * 100).toFixed(1)}%`;

const COLUMNS: Column<ToolStats>[] = [
  { header: 'TOOL', value: (t) => t.tool },
  { header: 'CALLS', value: (t) => String(t.calls) },
  { header: 'OK', value: (t) => String(t.ok) },
  {
    header: 'ERRORS',
    value: (t) => String(t.errors),
    colour: (text, t, c) => (t.errors > 0 ? c.red(text) : text),
  },
  { header: 'CANCELLED', value: (t) => String(t.cancelled) },
  { header: 'ERROR RATE', value: (t) => percent(t.errorRate) },
  { header: 'CACHED', value: (t) => String(t.cached) },
  { header: 'AVG', value: (t) => duration(t.avgMs) },
  { header: 'P95', value: (t) => duration(t.p95Ms) },
];

export const statsCommand: Command = {
  name: 'stats',
  summary: 'per tool calls, errors, average and p95 latency; cache hits',
  help: `usage: toolgate stats [--client ID] [-o table|json|yaml] [--gateway <url>] [--key <key>]

  The gateway's counts (GET /v1/stats): per tool its calls, ok, errors, cancelled, error rate,
  cached answers, average and p95 duration, most called first; then the cache's hits, misses
  and hit rate (admins: its keys and evictions too). A client's key sees its own calls of the
  tools in its scope; an admin's everyone's, or one client's with --client.
  -o json|yaml prints the whole report (rankings, slowest and recent calls, users).

  --client <id>  admin: one client's stats
${GATEWAY_HELP}

Exit codes: 0 shown, 1 the gateway refused (another client's with a non-admin key: 403) or
cannot be reached, 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS, client: { type: 'string' } },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const gw = gatewayOf(parsed, io);
    const client = parsed.values.client;
    const report = await apiOk<StatsReport>(
      io,
      gw,
      'GET',
      `/v1/stats${typeof client === 'string' ? `?client=${encodeURIComponent(client)}` : ''}`,
    );
    if (format !== 'table') {
      renderOne(io, format, report, []);
      return 0;
    }
    const tools = [...report.tools].sort(
      (a, b) => b.calls - a.calls || a.tool.localeCompare(b.tool),
    );
    render(io, 'table', tools, COLUMNS);
    const { hits, misses, hitRate, keys, evictions } = report.cache;
    io.out(
      `\ncache: ${hits} hits, ${misses} misses, hit rate ${percent(hitRate)}${keys === undefined ? '' : `, ${keys} keys`}${evictions === undefined ? '' : `, ${evictions} evictions`}\n`,
    );
    return 0;
  },
};
