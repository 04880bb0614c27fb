/** `toolgate sessions` and `toolgate sessions end ID`: long-lived sandboxes (docs/sessions.md). */
import type { AdminSessionList, SessionList, SessionView } from '@toolgate/gateway';
import { ExitError, UsageError, type Command } from '../command.js';
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
import { age, bytes } from './when.js';

type Row = SessionView & { clientId?: string; workerId?: string };

const COLUMNS = (all: boolean): Column<Row>[] => [
  { header: 'ID', value: (s) => s.id },
  ...(all ? [{ header: 'CLIENT', value: (s: Row) => s.clientId ?? '' }] : []),
  { header: 'USER', value: (s) => s.user ?? '' },
  { header: 'TOOL', value: (s) => s.tool },
  { header: 'CREATED', value: (s) => age(s.createdAt) },
  { header: 'LAST USED', value: (s) => age(s.lastUsedAt) },
  { header: 'EXPIRES', value: (s) => age(s.expiresAt) },
  { header: 'MEMORY', value: (s) => bytes(s.memoryBytes) },
  ...(all ? [{ header: 'WORKER', value: (s: Row) => s.workerId ?? '' }] : []),
];

export const sessionsCommand: Command = {
  name: 'sessions',
  summary: "your sessions (long-lived sandboxes); admins every client's with --all",
  help: `usage: toolgate sessions [--all [--limit N]] [-o table|json|yaml] [--gateway <url>] [--key <key>]

  The key's own sessions (GET /v1/sessions; a client's API key sees all of its users'): id,
  user, tool, age, last use, when it expires, its sandbox's memory.

  --all        admin: every client's sessions, oldest first (GET /v1/admin/sessions), with
               their client and worker; says on stderr when more exist than listed
  --limit <n>  with --all: at most n (1–500, default 100)
${GATEWAY_HELP}

Exit codes: 0 listed, 1 the gateway refused (--all with a non-admin key: 403) or cannot be
reached, 2 bad usage.
`,
  options: {
    ...GATEWAY_OPTIONS,
    all: { type: 'boolean', default: false },
    limit: { type: 'string' },
  },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const all = parsed.values.all === true;
    const limit = parsed.values.limit;
    if (limit !== undefined && !all)
      throw new UsageError('toolgate sessions: --limit goes with --all');
    if (typeof limit === 'string' && !(/^\d+$/.test(limit) && +limit >= 1 && +limit <= 500))
      throw new UsageError('toolgate sessions: --limit must be an integer from 1 to 500');
    const gw = gatewayOf(parsed, io);
    if (!all) {
      const { sessions } = await apiOk<SessionList>(io, gw, 'GET', '/v1/sessions');
      render(io, format, sessions, COLUMNS(false));
      return 0;
    }
    const page = await apiOk<AdminSessionList>(
      io,
      gw,
      'GET',
      `/v1/admin/sessions${typeof limit === 'string' ? `?limit=${limit}` : ''}`,
    );
    render(io, format, page.sessions, COLUMNS(true));
    if (page.truncated)
      io.err(`${page.sessions.length} of ${page.total} sessions shown (--limit, up to 500)\n`);
    return 0;
  },
};

export const sessionsEndCommand: Command = {
  name: 'sessions end',
  summary: 'end a session: its sandbox is killed at once',
  help: `usage: toolgate sessions end <id> [--admin] [-o table|json|yaml] [--gateway <url>] [--key <key>]

  Ends one of the key's sessions (DELETE /v1/sessions/<id>): its sandbox is killed at once,
  a call running in it ends.

  --admin      admin: any client's session (DELETE /v1/admin/sessions/<id>), recorded in that
               client's audit (event session) with who ended it
${GATEWAY_HELP}

Exit codes: 0 ended, 1 no such session (or another client's without --admin), the gateway
refused or cannot be reached, 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS, admin: { type: 'boolean', default: false } },
  args: { min: 1, max: 1 },
  async run(parsed, io) {
    const [id] = parsed.positionals as [string];
    const format = outputFormat(parsed, io);
    const gw = gatewayOf(parsed, io);
    const path = `${parsed.values.admin ? '/v1/admin/sessions' : '/v1/sessions'}/${encodeURIComponent(id)}`;
    const answer = await api(io, gw, 'DELETE', path);
    if (answer.status !== 204) throw new ExitError(1, apiErrorText(answer.status, answer.body));
    if (format === 'table') io.out(`session ${id} ended\n`);
    else renderOne(io, format, { id, ended: true }, []);
    return 0;
  },
};
