/**
 * `toolgate upstreams` and `toolgate upstreams approve ID TOOL`: the upstream MCP servers, their
 * tools' pins, and the approval of a changed definition after reading its diff — what the
 * console's Upstreams page does (docs/upstreams.md, "Trust and quarantine").
 */
import { createInterface } from 'node:readline/promises';
import type { UpstreamApproval, UpstreamReport, UpstreamToolReport } from '@toolgate/gateway';
import { ExitError, colours, type CliIo, type Command } from '../command.js';
import {
  GATEWAY_HELP,
  GATEWAY_OPTIONS,
  api,
  apiErrorText,
  apiOk,
  gatewayOf,
  outputFormat,
  render,
  renderOne,
  type Column,
} from '../remote/index.js';
import { definitionDiff, visibleText } from '../upstreams/definition-diff.js';

/** A tool not approved, as -o json|yaml print it: the API's report and the diff lines shown. */
type ReviewedTool = UpstreamToolReport & { diff?: string[] };

interface ToolRow {
  upstream: UpstreamReport;
  tool?: UpstreamToolReport;
}

const STATUS_COLOUR: Record<string, 'green' | 'yellow' | 'red'> = {
  approved: 'green',
  up: 'green',
  pending: 'yellow',
  unknown: 'yellow',
  quarantined: 'red',
  down: 'red',
};

const ROW_COLUMNS: Column<ToolRow>[] = [
  { header: 'UPSTREAM', value: (r) => r.upstream.id },
  {
    header: 'STATE',
    value: (r) => r.upstream.state,
    colour: (t, _r, c) => c[STATUS_COLOUR[t] ?? 'yellow'](t),
  },
  { header: 'TRUST', value: (r) => r.upstream.trust },
  { header: 'TOOL', value: (r) => (r.tool ? visibleText(r.tool.tool) : '—') },
  { header: 'NAME', value: (r) => (r.tool ? r.tool.name : '') },
  {
    header: 'STATUS',
    value: (r) => (r.tool ? r.tool.status + (r.tool.leftOut ? ' (left out)' : '') : ''),
    colour: (t, r, c) => (r.tool ? c[STATUS_COLOUR[r.tool.status] ?? 'yellow'](t) : t),
  },
  { header: 'FLAGS', value: (r) => (r.tool?.flags ?? []).map((f) => f.code).join(',') },
  { header: 'HASH', value: (r) => r.tool?.hash.slice(0, 12) ?? '' },
];

/** Diff lines coloured as `git diff` does: additions green, removals red, hunk headers cyan. */
function printDiff(io: CliIo, out: (text: string) => void, lines: readonly string[]): void {
  const c = colours(io);
  for (const line of lines) {
    const paint = line.startsWith('@@')
      ? c.cyan
      : line.startsWith('+++') || line.startsWith('---')
        ? c.bold
        : line.startsWith('+')
          ? c.green
          : line.startsWith('-')
            ? c.red
            : (t: string) => t;
    out(`${paint(line)}\n`);
  }
}

/** What an admin reads before approving: what the tool is, its scan flags, the diff. */
function printReview(
  io: CliIo,
  out: (text: string) => void,
  upstream: string,
  tool: UpstreamToolReport,
): void {
  const c = colours(io);
  const what =
    tool.status === 'quarantined'
      ? 'changed since it was approved (quarantined)'
      : 'never approved (pending)';
  out(`\n${c.bold(`${upstream}/${visibleText(tool.tool)}`)} (${tool.name}): ${what}\n`);
  out(`  hash ${tool.hash}\n`);
  if (tool.approvedHash) out(`  approved ${tool.approvedHash}${by(tool)}\n`);
  for (const f of tool.flags)
    out(
      `  ${c.yellow(`flag ${f.code}`)} at ${visibleText(f.at)}${f.key ? ' (property name)' : ''}: ${visibleText(f.match)}\n`,
    );
  if (tool.leftOut) out(`  left out: ${tool.leftOut}\n`);
  printDiff(io, out, definitionDiff(tool.approved, tool.current));
}

const by = (t: UpstreamToolReport) =>
  t.approvedBy ? ` by ${t.approvedBy}${t.approvedAt ? ` at ${t.approvedAt}` : ''}` : '';

async function upstreamReports(io: CliIo, gw: ReturnType<typeof gatewayOf>) {
  return apiOk<UpstreamReport[]>(io, gw, 'GET', '/v1/upstreams');
}

export const upstreamsCommand: Command = {
  name: 'upstreams',
  summary: 'upstream MCP servers, their tools and pins; the diff of each tool awaiting approval',
  help: `usage: toolgate upstreams [-o table|json|yaml] [--gateway <url>] [--key <key>]

  Admin: each upstream (GET /v1/upstreams) — its state (up, down, unknown), trust (pin, auto)
  and a row per tool: its own name, the toolgate name it is served as, its status (approved,
  pending: never approved, quarantined: changed since approved), scan flags and hash. Below
  the table, each pending or quarantined tool with its flags and a unified diff from the
  approved definition to the current one (all added lines for a tool never approved);
  invisible characters are spelled ⟨U+200B⟩, so a change made of them shows.
  Approve one with \`toolgate upstreams approve <upstream> <tool>\`.

  -o json|yaml prints the API's answer, each tool not approved with "diff" (the lines above).
${GATEWAY_HELP}

Exit codes: 0 listed (pending tools included), 1 the gateway refused (a non-admin key: 403)
or cannot be reached, 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const gw = gatewayOf(parsed, io);
    const reports = await upstreamReports(io, gw);
    if (format !== 'table') {
      const withDiffs = reports.map((u) => ({
        ...u,
        tools: u.tools.map((t): ReviewedTool =>
          t.status === 'approved' ? t : { ...t, diff: definitionDiff(t.approved, t.current) },
        ),
      }));
      render(io, format, withDiffs, []);
      return 0;
    }
    if (reports.length === 0) {
      io.out('no upstreams configured (upstreams: in the config, docs/upstreams.md)\n');
      return 0;
    }
    const rows = reports.flatMap((upstream): ToolRow[] =>
      upstream.tools.length > 0
        ? upstream.tools.map((tool) => ({ upstream, tool }))
        : [{ upstream }],
    );
    render(io, 'table', rows, ROW_COLUMNS);
    for (const u of reports) {
      if (u.leftOut.count > 0)
        io.out(
          `\n${u.id}: ${u.leftOut.count} tool(s) left out: ${u.leftOut.problems.join('; ')}\n`,
        );
      for (const t of u.tools) if (t.status !== 'approved') printReview(io, io.out, u.id, t);
    }
    return 0;
  },
};

/** Asks y/N on the terminal; anything but y/yes is no. */
async function confirm(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(question)).trim());
  } finally {
    rl.close();
  }
}

export const upstreamsApproveCommand: Command = {
  name: 'upstreams approve',
  summary: "approve an upstream tool's current definition, after showing its diff",
  help: `usage: toolgate upstreams approve <upstream> <tool> [--yes] [-o table|json|yaml] [--gateway <url>] [--key <key>]

  Admin: reads the tool's current definition and hash (GET /v1/upstreams), shows its scan flags
  and the diff from the approved definition (as \`toolgate upstreams\` does, on stderr), asks
  y/N on a terminal, then approves exactly that hash
  (POST /v1/upstreams/<upstream>/tools/<tool>/approve). If the definition changed in between,
  the gateway refuses (409) and nothing is approved: run it again to read the new diff.
  <tool> is the upstream's own name of the tool (\`echo\`) or the name toolgate serves
  (\`pinned__echo\`).

  --yes, -y            approve without asking (required when stdin is not a terminal)
${GATEWAY_HELP}

Exit codes: 0 approved (or it already was), 1 not approved (answered no, the definition
changed meanwhile, no such upstream or tool, a non-admin key, an unreachable gateway),
2 bad usage (including no --yes when stdin is not a terminal).
`,
  options: { ...GATEWAY_OPTIONS, yes: { type: 'boolean', short: 'y', default: false } },
  args: { min: 2, max: 2 },
  async run(parsed, io) {
    const [id, name] = parsed.positionals as [string, string];
    const format = outputFormat(parsed, io);
    const gw = gatewayOf(parsed, io);
    const upstream = (await upstreamReports(io, gw)).find((u) => u.id === id);
    if (!upstream) throw new ExitError(1, `toolgate: no upstream "${id}" (toolgate upstreams)`);
    const tool =
      upstream.tools.find((t) => t.tool === name) ?? upstream.tools.find((t) => t.name === name);
    if (!tool) throw new ExitError(1, `toolgate: upstream "${id}" has no tool "${name}"`);
    if (tool.status === 'approved') {
      io.err(
        `${id}/${tool.tool} is already approved (hash ${tool.hash.slice(0, 12)}${by(tool)})\n`,
      );
      return 0;
    }
    printReview(io, io.err, id, tool);
    if (!parsed.values.yes) {
      if (!process.stdin.isTTY)
        throw new ExitError(
          2,
          'toolgate upstreams approve: stdin is not a terminal to ask on; read the diff above and give --yes to approve',
        );
      if (
        !(await confirm(`Approve ${id}/${tool.tool} with hash ${tool.hash.slice(0, 12)}? [y/N] `))
      )
        throw new ExitError(1, 'not approved');
    }
    const answer = await api(
      io,
      gw,
      'POST',
      `/v1/upstreams/${encodeURIComponent(id)}/tools/${encodeURIComponent(tool.tool)}/approve`,
      { hash: tool.hash },
    );
    if (answer.status === 409)
      throw new ExitError(
        1,
        `${apiErrorText(answer.status, answer.body)}\n  nothing was approved: run it again to read the new diff`,
      );
    if (answer.status !== 200) throw new ExitError(1, apiErrorText(answer.status, answer.body));
    const approval = answer.body as UpstreamApproval;
    renderOne(io, format, approval, [
      { header: 'UPSTREAM', value: (a) => a.upstream },
      { header: 'TOOL', value: (a) => visibleText(a.tool) },
      { header: 'STATUS', value: (a) => a.status, colour: (t, _a, c) => c.green(t) },
      { header: 'HASH', value: (a) => a.hash },
      { header: 'BY', value: (a) => a.approvedBy ?? '' },
      { header: 'AT', value: (a) => a.approvedAt ?? '' },
    ]);
    return 0;
  },
};
