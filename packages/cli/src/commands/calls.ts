/**
 * `toolgate calls`, `calls show`, `calls logs`, `calls cancel`: the calls a gateway has seen, one
 * call's record and live output, and stopping one — the console's call pages from a terminal.
 */
import type { CallList, CallListItem, CallView } from '@toolgate/gateway';
import { stringify } from 'yaml';
import { ExitError, UsageError, type CliIo, type Command, type Parsed } from '../command.js';
import {
  GATEWAY_HELP,
  GATEWAY_OPTIONS,
  api,
  apiErrorText,
  apiOk,
  follower,
  gatewayOf,
  interrupt,
  outputFormat,
  render,
  renderOne,
  sse,
  type Colours,
  type Column,
  type OutputFormat,
  type SseEvent,
} from '../remote/index.js';

const STATUSES = [
  'queued',
  'running',
  'ok',
  'error',
  'cancelled',
  'pending_approval',
  'rejected',
  'expired',
];
/** How often `calls --follow` asks for new calls. */
const FOLLOW_POLL_MS = 1000;
/**
 * `calls logs` without -f on a call in flight: the backlog ends at the first event made after the
 * stream opened (its `at`), or when nothing came this long (a quiet call).
 */
const BACKLOG_QUIET_MS = 300;

export function statusColour(status: string, c: Colours): string {
  if (status.startsWith('ok')) return c.green(status);
  if (/^(error|rejected|expired)/.test(status)) return c.red(status);
  if (status.startsWith('cancelled')) return c.yellow(status);
  if (status.startsWith('pending_approval')) return c.magenta(status);
  return c.cyan(status);
}

/** An ISO time to the second, for tables. */
export function shortTime(iso: string | undefined): string {
  return iso ? iso.replace(/\.\d+Z$/, 'Z') : '';
}

function duration(ms: number | undefined): string {
  if (ms === undefined) return '';
  return ms < 1000 ? `${ms}ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)}s`;
}

const CALL_COLUMNS: Column<CallListItem>[] = [
  { header: 'ID', value: (c) => c.id },
  { header: 'TOOL', value: (c) => c.tool },
  { header: 'CLIENT', value: (c) => (c.user ? `${c.client}:${c.user}` : c.client) },
  {
    header: 'STATUS',
    value: (c) => (c.errorCode ? `${c.status} (${c.errorCode})` : c.status),
    colour: (text, _c, c) => statusColour(text, c),
  },
  { header: 'DURATION', value: (c) => duration(c.durationMs) + (c.cached ? ' (cached)' : '') },
  { header: 'CREATED', value: (c) => shortTime(c.createdAt) },
];

function json(value: unknown): string {
  return value === undefined ? '' : JSON.stringify(value);
}

const CALL_FIELDS: Column<CallView>[] = [
  { header: 'ID', value: (c) => c.id },
  { header: 'TOOL', value: (c) => c.tool },
  { header: 'CLIENT', value: (c) => c.client },
  { header: 'USER', value: (c) => c.user ?? '' },
  { header: 'STATUS', value: (c) => c.status, colour: (text, _c, c) => statusColour(text, c) },
  { header: 'CREATED', value: (c) => c.createdAt },
  { header: 'DURATION', value: (c) => duration(c.durationMs) },
  { header: 'CACHED', value: (c) => (c.cached ? 'yes' : '') },
  { header: 'ARGUMENTS', value: (c) => json(c.arguments) },
  {
    header: 'APPROVAL',
    value: (c) =>
      c.approval
        ? `${c.approval.decision} by ${c.approval.by} at ${c.approval.at}${c.approval.reason ? `: ${c.approval.reason}` : ''}`
        : '',
  },
  { header: 'CANCELLED BY', value: (c) => c.cancelledBy ?? '' },
  {
    header: 'POLICY',
    value: (c) => (c.policy ? `${c.policy.decision} (${c.policy.policies.join(', ')})` : ''),
  },
  { header: 'ERROR', value: (c) => (c.error ? `${c.error.code}: ${c.error.message}` : '') },
  { header: 'RESULT', value: (c) => json(c.result) },
  {
    header: 'TRUNCATED',
    value: (c) =>
      c.resultTruncated
        ? `stored result cut to ${c.resultTruncated.maxBytes} of ${c.resultTruncated.originalBytes} bytes`
        : '',
  },
  { header: 'TRACE', value: (c) => c.traceId ?? '' },
];

function text(parsed: Parsed, name: string): string | undefined {
  const v = parsed.values[name];
  return typeof v === 'string' ? v : undefined;
}

/** `--since 10m` (s, m, h, d ago) or an ISO time, as the ISO time the API takes. */
export function sinceTime(given: string, now = Date.now()): string {
  const ago = /^(\d+)([smhd])$/.exec(given);
  if (ago) {
    const unit = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[ago[2] as 's'];
    return new Date(now - Number(ago[1]) * unit).toISOString();
  }
  const at = Date.parse(given);
  if (Number.isNaN(at))
    throw new UsageError(
      `toolgate calls: --since must be a duration (30s, 10m, 2h, 1d) or an ISO time, got "${given}"`,
    );
  return new Date(at).toISOString();
}

function listQuery(parsed: Parsed, since: string | undefined): string {
  const q = new URLSearchParams();
  for (const name of ['client', 'user', 'tool', 'status'] as const) {
    const v = text(parsed, name);
    if (v !== undefined) q.set(name, v);
  }
  const status = text(parsed, 'status');
  if (status !== undefined && !STATUSES.includes(status))
    throw new UsageError(`toolgate calls: --status must be one of ${STATUSES.join(', ')}`);
  const limit = text(parsed, 'limit') ?? '50';
  if (!/^\d+$/.test(limit) || Number(limit) < 1 || Number(limit) > 200)
    throw new UsageError('toolgate calls: --limit must be an integer from 1 to 200');
  q.set('limit', limit);
  if (since !== undefined) q.set('since', since);
  return q.toString();
}

const CONNECTION = `${GATEWAY_HELP}`;

export const callsCommand: Command = {
  name: 'calls',
  summary: 'recent calls, newest first; --follow adds calls as they come',
  help: `usage: toolgate calls [--follow] [--client ID] [--user SUB] [--tool NAME] [--status S]
                      [--since 10m|ISO] [--limit N] [-o table|json|yaml]

  Recent calls (GET /v1/calls), newest first: a client's key sees its own, an admin's everyone's.
  With --follow the list stays open like \`kubectl get -w\`: the calls listed, then a line for
  each new call and each change of a call's status (asked every second), until Ctrl-C.
  -o json with --follow prints one JSON object a line.

  -f, --follow        keep printing new calls and status changes
  --client <id>       one client's calls (admins)
  --user <sub>        one user's calls
  --tool <name>       one tool's calls
  --status <s>        ${STATUSES.join(', ')}
  --since <when>      calls made since then: 30s, 10m, 2h, 1d ago, or an ISO time
  --limit <n>         at most n calls (1–200, default 50)
${CONNECTION}

Exit codes: 0 listed (or Ctrl-C after --follow: 130), 1 the gateway refused or cannot be reached,
2 bad usage.
`,
  options: {
    ...GATEWAY_OPTIONS,
    follow: { type: 'boolean', short: 'f', default: false },
    client: { type: 'string' },
    user: { type: 'string' },
    tool: { type: 'string' },
    status: { type: 'string' },
    since: { type: 'string' },
    limit: { type: 'string' },
  },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const given = text(parsed, 'since');
    const since = given === undefined ? undefined : sinceTime(given);
    listQuery(parsed, since); // bad flags are usage errors before any request
    const gw = gatewayOf(parsed, io);
    if (!parsed.values.follow) {
      const { calls, partial } = await apiOk<CallList>(
        io,
        gw,
        'GET',
        `/v1/calls?${listQuery(parsed, since)}`,
      );
      render(io, format, calls, CALL_COLUMNS);
      if (partial && format === 'table')
        io.err('toolgate: the listing stopped at its bound; older calls may match (narrow it)\n');
      return 0;
    }
    return followCalls(parsed, io, format, gw, since);
  },
};

async function followCalls(
  parsed: Parsed,
  io: CliIo,
  format: OutputFormat,
  gw: ReturnType<typeof gatewayOf>,
  since: string | undefined,
): Promise<number> {
  const stop = interrupt(io);
  const out = follower(io, format, CALL_COLUMNS);
  /** What each call was last printed as: a call is printed again only when its status changed. */
  const printed = new Map<string, string>();
  let from = since;
  try {
    for (let first = true; !stop.signal.aborted; first = false) {
      // After the first listing, the most the API gives (200): a busy second must not hide calls.
      const query = listQuery(parsed, from);
      const answer = await api(
        io,
        gw,
        'GET',
        `/v1/calls?${first ? query : query.replace(/(^|&)limit=\d+/, '$1limit=200')}`,
      );
      if (answer.status !== 200) throw new ExitError(1, apiErrorText(answer.status, answer.body));
      const { calls } = answer.body as CallList;
      const fresh = calls
        .filter((c) => printed.get(c.id) !== c.status)
        .sort((a, b) => a.createdAt.localeCompare(b.createdAt));
      for (const c of fresh) printed.set(c.id, c.status);
      // Oldest first: time runs down the screen, new lines at the bottom.
      out.push(fresh);
      // Ask next from the oldest call still in flight (its status will change), else the newest
      // seen; the gateway's clock, not ours. Before any call: from the gateway's Date header.
      const open = calls.filter(
        (c) => !['ok', 'error', 'cancelled', 'rejected', 'expired'].includes(c.status),
      );
      const times = (open.length > 0 ? open : calls).map((c) => c.createdAt).sort();
      const serverNow = Date.parse(answer.headers.get('date') ?? '');
      from =
        times[0] ??
        from ??
        new Date((Number.isNaN(serverNow) ? Date.now() : serverNow) - 2000).toISOString();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, FOLLOW_POLL_MS);
        stop.signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), {
          once: true,
        });
      });
    }
    return 130;
  } finally {
    stop.dispose();
  }
}

function callPath(id: string, rest = ''): string {
  return `/v1/calls/${encodeURIComponent(id)}${rest}`;
}

export const callsShowCommand: Command = {
  name: 'calls show',
  summary: 'one call: status, arguments (redacted), result or error, who decided',
  help: `usage: toolgate calls show <id> [-o table|json|yaml]

  One call as GET /v1/calls/<id> has it: tool, client, status, arguments (redacted), result or
  error, duration, the approval decision, who cancelled it, the policy decision, the trace id.

${CONNECTION}

Exit codes: 0 shown, 1 no such call (or another client's), refused or unreachable, 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS },
  args: { min: 1, max: 1 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const call = await apiOk<CallView>(
      io,
      gatewayOf(parsed, io),
      'GET',
      callPath(parsed.positionals[0]!),
    );
    renderOne(io, format, call, CALL_FIELDS);
    return 0;
  },
};

export const callsCancelCommand: Command = {
  name: 'calls cancel',
  summary: 'stop a parked, queued or running call',
  help: `usage: toolgate calls cancel <id> [-o table|json|yaml]

  Stops the call (POST /v1/calls/<id>/cancel): a parked or queued call never runs, a running
  one's sandbox is killed. Prints the call, now cancelled; when its worker has not confirmed
  within 5 s, says the cancel is asked (\`toolgate calls show\` follows it).

${CONNECTION}

Exit codes: 0 cancelled (or asked), 1 it had already ended (409 conflict), no such call, refused
or unreachable, 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS },
  args: { min: 1, max: 1 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const id = parsed.positionals[0]!;
    const answer = await api(io, gatewayOf(parsed, io), 'POST', callPath(id, '/cancel'));
    if (answer.status !== 200 && answer.status !== 202)
      throw new ExitError(1, apiErrorText(answer.status, answer.body));
    const call = answer.body as CallView;
    if (format !== 'table') renderOne(io, format, call, CALL_FIELDS);
    else
      io.out(
        answer.status === 200
          ? `call ${call.id} (${call.tool}) ${call.status}\n`
          : `call ${call.id} (${call.tool}): cancel asked, its worker has not confirmed yet (status ${call.status})\n`,
      );
    return 0;
  },
};

/** A finished call's output: a sandbox result's stdout/stderr, a text result, else its JSON. */
function resultOutput(result: unknown): { stdout: string; stderr: string } {
  if (typeof result === 'string') return { stdout: result, stderr: '' };
  const r = result as { stdout?: unknown; stderr?: unknown } | null | undefined;
  if (r && (typeof r.stdout === 'string' || typeof r.stderr === 'string'))
    return {
      stdout: typeof r.stdout === 'string' ? r.stdout : '',
      stderr: typeof r.stderr === 'string' ? r.stderr : '',
    };
  return { stdout: result === undefined ? '' : `${JSON.stringify(result, null, 2)}\n`, stderr: '' };
}

function withNewline(s: string): string {
  return s === '' || s.endsWith('\n') ? s : `${s}\n`;
}

export const callsLogsCommand: Command = {
  name: 'calls logs',
  summary: "a call's output; -f follows it live until the outcome",
  help: `usage: toolgate calls logs <id> [-f] [-o table|json|yaml]

  The call's output (GET /v1/calls/<id>/events): stdout to stdout, stderr to stderr, as the tool
  wrote them. With -f, follows a running call live (progress as lines on stderr) until its
  outcome, then prints the outcome on stderr; reconnects with Last-Event-ID if the connection
  drops. Without -f, a call in flight prints what it wrote so far; a finished call prints its
  result's stdout and stderr (a sandbox call), or the result itself.
  The text goes out as it is, into a pipe too; -o json (or yaml) prints the events themselves,
  one JSON object a line: {"event", ...data}.

  -f, --follow        follow until the call ends (Ctrl-C stops following; the call runs on)
${CONNECTION}

Exit codes: 0 printed (Ctrl-C while following: 130), 1 no such call, refused or unreachable,
2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS, follow: { type: 'boolean', short: 'f', default: false } },
  args: { min: 1, max: 1 },
  async run(parsed, io) {
    // Text by default even into a pipe (`> out.txt`, `| grep`), as `kubectl logs`: it is the output.
    const format = parsed.values.output === undefined ? 'table' : outputFormat(parsed, io);
    const id = parsed.positionals[0]!;
    const gw = gatewayOf(parsed, io);
    const follow = parsed.values.follow === true;
    const stop = interrupt(io);
    const done = new AbortController();
    const both = AbortSignal.any([stop.signal, done.signal]);
    let quiet: ReturnType<typeof setTimeout> | undefined;
    const settle = () => {
      if (follow) return;
      clearTimeout(quiet);
      quiet = setTimeout(() => done.abort(), BACKLOG_QUIET_MS);
    };
    let streamError: string | undefined;
    let sawOutput = false;
    let openedAt: number | undefined;
    const onEvent = (e: SseEvent) => {
      // Events of the same chunk after the one that ended it.
      if (done.signal.aborted) return;
      let data: Record<string, unknown>;
      try {
        data = JSON.parse(e.data) as Record<string, unknown>;
      } catch {
        return;
      }
      // The gateway's own status event (no id) carries when the stream opened; without -f,
      // what the call writes from then on is not "so far".
      if (e.event === 'status' && e.id === undefined && typeof data.at === 'number')
        openedAt ??= data.at;
      else if (
        !follow &&
        e.event !== 'outcome' &&
        openedAt !== undefined &&
        typeof data.at === 'number' &&
        data.at > openedAt
      ) {
        done.abort();
        return;
      }
      if (format !== 'table') {
        const event = { event: e.event, ...data };
        io.out(format === 'json' ? `${JSON.stringify(event)}\n` : `---\n${stringify(event)}`);
      } else if (e.event === 'output') {
        sawOutput = true;
        (data.stream === 'stderr' ? io.err : io.out)(String(data.text ?? ''));
      } else if (e.event === 'progress' && follow) {
        const of = data.total === undefined ? '' : `/${String(data.total)}`;
        io.err(
          `progress ${String(data.progress)}${of}${data.message ? ` ${String(data.message)}` : ''}\n`,
        );
      } else if (e.event === 'outcome') {
        const call = data as unknown as CallView;
        // A finished call replays no live output: its result holds it.
        if (!sawOutput) {
          const { stdout, stderr } = resultOutput(call.result);
          io.out(withNewline(stdout));
          io.err(withNewline(stderr));
        }
        if (call.error) io.err(`${call.status}: ${call.error.code}: ${call.error.message}\n`);
        else if (follow)
          io.err(
            `${call.status}${call.durationMs === undefined ? '' : ` in ${duration(call.durationMs)}`}\n`,
          );
      } else if (e.event === 'error') {
        streamError = `toolgate: the event stream failed: ${String(data.code)}: ${String(data.message)}`;
      }
      if (e.event === 'outcome' || e.event === 'error') done.abort();
      else settle();
    };
    try {
      await sse(gw, callPath(id, '/events'), onEvent, both, {
        onReconnect: (why) => io.err(`toolgate: ${why}; reconnecting\n`),
      });
    } finally {
      clearTimeout(quiet);
      stop.dispose();
    }
    if (streamError) throw new ExitError(1, streamError);
    return stop.interrupted ? 130 : 0;
  },
};
