/**
 * `toolgate approvals`, `approve`, `deny`: the calls parked for an admin's decision, and the
 * decision — the console's approvals page from a terminal (admin key).
 */
import type { ApprovalEvent, DecisionAnswer, PendingApproval } from '@toolgate/gateway';
import type { Command } from '../command.js';
import {
  GATEWAY_HELP,
  GATEWAY_OPTIONS,
  apiOk,
  follower,
  gatewayOf,
  interrupt,
  outputFormat,
  render,
  renderOne,
  sse,
  type Column,
} from '../remote/index.js';
import { shortTime } from './calls.js';

const PREVIEW = 60;

function preview(args: unknown): string {
  const text = JSON.stringify(args) ?? '';
  return text.length > PREVIEW ? `${text.slice(0, PREVIEW - 1)}…` : text;
}

const PENDING_COLUMNS: Column<PendingApproval>[] = [
  { header: 'ID', value: (a) => a.id },
  { header: 'TOOL', value: (a) => a.tool },
  { header: 'CLIENT', value: (a) => a.client },
  { header: 'ARGUMENTS', value: (a) => preview(a.arguments) },
  { header: 'CREATED', value: (a) => shortTime(a.createdAt) },
  { header: 'EXPIRES', value: (a) => shortTime(a.expiresAt) },
];

/** One line of `approvals --follow`: what happened to which call. */
interface ApprovalRow {
  event: 'pending' | 'parked' | 'approved' | 'rejected' | 'expired' | 'cancelled';
  id: string;
  tool: string;
  client: string;
  detail: string;
}

const EVENT_COLUMNS: Column<ApprovalRow>[] = [
  {
    header: 'EVENT',
    value: (r) => r.event,
    colour: (text, r, c) =>
      r.event === 'approved'
        ? c.green(text)
        : r.event === 'rejected' || r.event === 'expired'
          ? c.red(text)
          : r.event === 'cancelled'
            ? c.yellow(text)
            : c.magenta(text),
  },
  { header: 'ID', value: (r) => r.id },
  { header: 'TOOL', value: (r) => r.tool },
  { header: 'CLIENT', value: (r) => r.client },
  { header: 'DETAIL', value: (r) => r.detail },
];

function pendingRow(event: 'pending' | 'parked', a: PendingApproval): ApprovalRow {
  return { event, id: a.id, tool: a.tool, client: a.client, detail: preview(a.arguments) };
}

export const approvalsCommand: Command = {
  name: 'approvals',
  summary: 'calls waiting for an approval (admin); --follow shows them as they come and go',
  help: `usage: toolgate approvals [--follow] [-o table|json|yaml]

  The calls parked for an admin's decision (GET /v1/approvals), oldest first, at most 200:
  id, tool, client, arguments (redacted, cut), when it was parked and when it expires.
  With --follow (GET /v1/approvals/events) the pending calls, then a line as each call is parked,
  approved, rejected, expires or is cancelled, on any gateway, until Ctrl-C; -o json prints one
  JSON object a line ({"event","id","tool","client","detail"}). Decide with \`toolgate approve\`
  or \`toolgate deny\`. Needs an admin key.

  -f, --follow        keep printing what happens to parked calls
${GATEWAY_HELP}

Exit codes: 0 listed (Ctrl-C after --follow: 130), 1 not an admin, refused or unreachable,
2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS, follow: { type: 'boolean', short: 'f', default: false } },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const gw = gatewayOf(parsed, io);
    if (!parsed.values.follow) {
      render(
        io,
        format,
        await apiOk<PendingApproval[]>(io, gw, 'GET', '/v1/approvals'),
        PENDING_COLUMNS,
      );
      return 0;
    }
    const out = follower(io, format, EVENT_COLUMNS);
    // Decisions name the call only: its tool comes from when it was listed or parked.
    const tools = new Map<string, string>();
    const stop = interrupt(io);
    try {
      await sse(
        gw,
        '/v1/approvals/events',
        ({ event, data }) => {
          let e: ApprovalEvent;
          try {
            e = { type: event, ...(JSON.parse(data) as object) } as ApprovalEvent;
          } catch {
            return;
          }
          if (e.type === 'snapshot') {
            // A reconnect sends a snapshot again: only calls not listed yet.
            const fresh = e.pending.filter((a) => !tools.has(a.id));
            for (const a of fresh) tools.set(a.id, a.tool);
            out.push(fresh.map((a) => pendingRow('pending', a)));
          } else if (e.type === 'parked') {
            // Parked while the feed opened: in the snapshot already.
            if (tools.has(e.approval.id)) return;
            tools.set(e.approval.id, e.approval.tool);
            out.push([pendingRow('parked', e.approval)]);
          } else if (e.type === 'decided') {
            out.push([
              {
                event: e.decision,
                id: e.id,
                tool: tools.get(e.id) ?? '',
                client: e.client,
                detail: `by ${e.by}${e.reason ? `: ${e.reason}` : ''}`,
              },
            ]);
          } else if (e.type === 'expired' || e.type === 'cancelled') {
            out.push([
              {
                event: e.type,
                id: e.id,
                tool: tools.get(e.id) ?? '',
                client: e.client,
                detail: e.type === 'cancelled' ? `by ${e.by}` : '',
              },
            ]);
          }
        },
        stop.signal,
        { onReconnect: (why) => io.err(`toolgate: ${why}; reconnecting\n`) },
      );
    } finally {
      stop.dispose();
    }
    return 130;
  },
};

const DECISION_FIELDS: Column<DecisionAnswer>[] = [
  { header: 'ID', value: (d) => d.id },
  { header: 'DECISION', value: (d) => d.decision },
  { header: 'BY', value: (d) => d.by },
  { header: 'STATUS', value: (d) => d.status },
];

function decide(decision: 'approve' | 'reject'): Command['run'] {
  return async (parsed, io) => {
    const format = outputFormat(parsed, io);
    const id = parsed.positionals[0]!;
    const reason = typeof parsed.values.reason === 'string' ? parsed.values.reason : undefined;
    const answer = await apiOk<DecisionAnswer>(
      io,
      gatewayOf(parsed, io),
      'POST',
      `/v1/approvals/${encodeURIComponent(id)}/${decision}`,
      reason === undefined ? {} : { reason },
    );
    if (format !== 'table') renderOne(io, format, answer, DECISION_FIELDS);
    else io.out(`call ${answer.id} ${answer.decision} by ${answer.by}\n`);
    return 0;
  };
}

export const approveCommand: Command = {
  name: 'approve',
  summary: 'approve a parked call (admin): it runs',
  help: `usage: toolgate approve <id> [-o table|json|yaml]

  Approves the parked call (POST /v1/approvals/<id>/approve): it is queued and runs. Prints
  "call <id> approved by <admin>". Needs an admin key; a user may not approve its own call.

${GATEWAY_HELP}

Exit codes: 0 approved, 1 no such parked call, already decided (409), not an admin, refused or
unreachable, 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS },
  args: { min: 1, max: 1 },
  run: decide('approve'),
};

export const denyCommand: Command = {
  name: 'deny',
  summary: 'deny (reject) a parked call (admin), with a reason the caller sees',
  help: `usage: toolgate deny <id> [--reason TEXT] [-o table|json|yaml]

  Rejects the parked call (POST /v1/approvals/<id>/reject): it never runs and its caller gets
  status "rejected" with the reason. Needs an admin key.

  --reason <text>     why, shown to the caller and kept in the audit log
${GATEWAY_HELP}

Exit codes: 0 denied, 1 no such parked call, already decided (409), not an admin, refused or
unreachable, 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS, reason: { type: 'string' } },
  args: { min: 1, max: 1 },
  run: decide('reject'),
};
