/**
 * `toolgate audit [--follow]`: the audit log (GET /v1/audit) — calls, refusals, decisions,
 * upstream pins, secret writes, session ends, workspace resets. The API has no stream of it, so
 * --follow polls the newest entries and prints those not seen yet.
 */
import type { AuditEntry } from '@toolgate/gateway';
import { ExitError, UsageError, type CliIo, type Command, type Parsed } from '../command.js';
import {
  GATEWAY_HELP,
  GATEWAY_OPTIONS,
  api,
  apiErrorText,
  follower,
  gatewayOf,
  outputFormat,
  render,
  type Column,
} from '../remote/index.js';
import { duration } from './when.js';

const EVENTS = [
  'call',
  'refused',
  'approval',
  'cancel',
  'upstream',
  'secret',
  'session',
  'workspace',
] as const;

/** How often --follow asks for the newest entries. */
export const AUDIT_FOLLOW_POLL_MS = 1000;
/** Entries --follow reads per poll: more than this many new ones within a poll are not all shown. */
export const AUDIT_FOLLOW_PAGE = 200;

const STATUS_COLOUR: Record<string, 'green' | 'red' | 'yellow'> = {
  ok: 'green',
  approved: 'green',
  error: 'red',
  refused: 'red',
  rejected: 'red',
  denied: 'red',
  quarantined: 'red',
  cancelled: 'yellow',
  expired: 'yellow',
};

const COLUMNS: Column<AuditEntry>[] = [
  { header: 'TIME', value: (e) => e.at },
  { header: 'EVENT', value: (e) => e.event },
  { header: 'CLIENT', value: (e) => (e.user ? `${e.client}:${e.user}` : e.client) },
  { header: 'TOOL', value: (e) => e.tool },
  {
    header: 'STATUS',
    value: (e) => e.status,
    colour: (t, _e, c) => (STATUS_COLOUR[t] ? c[STATUS_COLOUR[t]](t) : t),
  },
  { header: 'BY', value: (e) => e.by ?? '' },
  { header: 'DURATION', value: (e) => duration(e.durationMs) },
  { header: 'CALL', value: (e) => e.callId ?? '' },
  {
    header: 'DETAIL',
    value: (e) =>
      [
        e.reason,
        e.secret && `secret ${e.secret}`,
        e.hash && `hash ${e.hash.slice(0, 12)}`,
        e.policy && `policy ${e.policy.decision} ${e.policy.policies.join(',')}`.trim(),
        e.truncated && 'truncated',
      ]
        .filter(Boolean)
        .join('; '),
  },
];

function query(parsed: Parsed, limit: string | undefined): string {
  const q = new URLSearchParams();
  if (limit) q.set('limit', limit);
  for (const [flag, param] of [
    ['client', 'client'],
    ['tool', 'tool'],
    ['event', 'event'],
    ['call', 'callId'],
  ] as const) {
    const v = parsed.values[flag];
    if (typeof v === 'string') q.set(param, v);
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

async function page(io: CliIo, gw: ReturnType<typeof gatewayOf>, path: string) {
  const answer = await api(io, gw, 'GET', path);
  if (answer.status !== 200) throw new ExitError(1, apiErrorText(answer.status, answer.body));
  return {
    entries: answer.body as AuditEntry[],
    partial: answer.headers.get('toolgate-partial') === 'true',
  };
}

export const auditCommand: Command = {
  name: 'audit',
  summary: 'the audit log: calls, refusals, decisions, upstream pins, secrets; --follow',
  help: `usage: toolgate audit [--follow] [--client ID] [--tool NAME] [--event TYPE] [--call ID] [--limit N] [-o table|json|yaml] [--gateway <url>] [--key <key>]

  Admin: recent audit entries (GET /v1/audit), newest first: time, event, client (and user),
  tool, status, who decided, duration, call id, and a detail (reason, secret name, definition
  hash, policy decision). Says on stderr when the gateway stopped reading at its bound
  (Toolgate-Partial): older matches may exist, narrow with --client.

  --follow, -f     print the last entries oldest first, then each new one as it is written
                   (polls every ${AUDIT_FOLLOW_POLL_MS / 1000} s; Ctrl-C stops); -o json prints one object a line
  --client <id>    one client's entries (upstream events: upstream:<id>)
  --tool <name>    one tool's
  --event <type>   ${EVENTS.join(', ')}
  --call <id>      one call's
  --limit <n>      at most n entries (1–1000; default 100, with --follow the last 20 first)
${GATEWAY_HELP}

Exit codes: 0 listed, 1 the gateway refused (a non-admin key: 403) or cannot be reached,
2 bad usage, 130 --follow stopped by Ctrl-C.
`,
  options: {
    ...GATEWAY_OPTIONS,
    follow: { type: 'boolean', short: 'f', default: false },
    client: { type: 'string' },
    tool: { type: 'string' },
    event: { type: 'string' },
    call: { type: 'string' },
    limit: { type: 'string' },
  },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const { event, limit } = parsed.values;
    if (typeof event === 'string' && !(EVENTS as readonly string[]).includes(event))
      throw new UsageError(`toolgate audit: --event must be one of ${EVENTS.join(', ')}`);
    if (typeof limit === 'string' && !(/^\d+$/.test(limit) && +limit >= 1 && +limit <= 1000))
      throw new UsageError('toolgate audit: --limit must be an integer from 1 to 1000');
    const gw = gatewayOf(parsed, io);
    if (!parsed.values.follow) {
      const { entries, partial } = await page(
        io,
        gw,
        `/v1/audit${query(parsed, typeof limit === 'string' ? limit : undefined)}`,
      );
      render(io, format, entries, COLUMNS);
      if (partial)
        io.err(
          'the gateway stopped at its read bound: older matches may exist (narrow with --client)\n',
        );
      return 0;
    }
    return follow(parsed, io, format, gw, typeof limit === 'string' ? +limit : 20);
  },
};

/**
 * Polls the newest AUDIT_FOLLOW_PAGE entries and prints those not printed yet, in time order.
 * Entries have no id: an entry is its JSON text, and the texts of the previous page are what
 * "seen" means (an entry older than that page cannot come back into it).
 */
async function follow(
  parsed: Parsed,
  io: CliIo,
  format: ReturnType<typeof outputFormat>,
  gw: ReturnType<typeof gatewayOf>,
  backlog: number,
): Promise<number> {
  const out = follower(io, format, COLUMNS);
  const path = `/v1/audit${query(parsed, String(AUDIT_FOLLOW_PAGE))}`;
  let seen = new Set<string>();
  for (let first = true; !io.signal?.aborted; first = false) {
    const { entries } = await page(io, gw, path);
    const keyed = entries.map((e) => [JSON.stringify(e), e] as const);
    const fresh = keyed.filter(([k]) => !seen.has(k)).map(([, e]) => e);
    seen = new Set(keyed.map(([k]) => k));
    // Newest first from the API; printed oldest first so the newest is the last line.
    out.push((first ? fresh.slice(0, backlog) : fresh).reverse());
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, AUDIT_FOLLOW_POLL_MS);
      function done() {
        clearTimeout(timer);
        io.signal?.removeEventListener('abort', done);
        resolve();
      }
      io.signal?.addEventListener('abort', done, { once: true });
    });
  }
  return 130;
}
