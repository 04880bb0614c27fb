/**
 * `toolgate shards` and `toolgate shards move <client> <shard>`: the Redis shards with their
 * clients, and moving a client to another (docs/sharding.md, "Moving a client").
 */
import type { ShardMoveRecord } from '@toolgate/calls';
import type { ShardView } from '@toolgate/gateway';
import { ExitError, colours, type Command } from '../command.js';
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

const SHARD_COLUMNS: Column<ShardView>[] = [
  { header: 'SHARD', value: (s) => s.id + (s.home ? ' (home)' : '') },
  {
    header: 'STATE',
    value: (s) => s.state,
    colour: (t, _s, c) => (t === 'up' ? c.green(t) : c.red(t)),
  },
  { header: 'CLIENTS', value: (s) => String(s.clients.length) },
  {
    header: 'NAMES',
    value: (s) => s.clients.map((c) => (s.moving.includes(c) ? `${c} (moving)` : c)).join(', '),
  },
];

const MOVE_FIELDS: Column<ShardMoveRecord>[] = [
  { header: 'MOVE', value: (m) => m.id },
  { header: 'CLIENT', value: (m) => m.client },
  { header: 'FROM', value: (m) => m.from },
  { header: 'TO', value: (m) => m.to },
  { header: 'STATE', value: (m) => m.state },
  { header: 'KEYS COPIED', value: (m) => String(m.keysCopied) },
  { header: 'KEYS DELETED', value: (m) => String(m.keysDeleted) },
  { header: 'STARTED', value: (m) => m.startedAt },
  { header: 'ENDED', value: (m) => m.endedAt ?? '' },
  { header: 'ERROR', value: (m) => m.error ?? '' },
];

export const shardsCommand: Command = {
  name: 'shards',
  summary: 'the Redis shards: state and the clients on each',
  help: `usage: toolgate shards [-o table|json|yaml] [--gateway <url>] [--key <key>]

  Admin: each shard (GET /v1/shards) — its id (home: deployment-wide data), state (up: the
  gateway's connection is ready, down), and the clients on it now, where moves put them;
  a client being moved away is marked (moving).
${GATEWAY_HELP}

Exit codes: 0 listed, 1 the gateway refused (a non-admin key: 403) or cannot be reached,
2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const gw = gatewayOf(parsed, io);
    const { shards } = await apiOk<{ shards: ShardView[] }>(io, gw, 'GET', '/v1/shards');
    render(io, format, shards, SHARD_COLUMNS);
    return 0;
  },
};

/** How often a running move's progress is read. */
const POLL_MS = 300;

export const shardsMoveCommand: Command = {
  name: 'shards move',
  summary: "move a client's data and new calls to another shard",
  help: `usage: toolgate shards move <client> <shard> [-o table|json|yaml] [--gateway <url>] [--key <key>]

  Admin: starts the move (POST /v1/shards/moves) and follows it to its end
  (GET /v1/shards/moves/<id>): the client's new calls wait while its calls in flight end
  (draining), its durable data is copied (copying), then its placement flips, its held calls
  run on the new shard and the old copies are deleted (cleaning, done). On a terminal a
  progress line is drawn on stderr. The move's record is printed at the end.
  What moves and what does not: docs/sharding.md, "Moving a client".
${GATEWAY_HELP}

Exit codes: 0 moved, 1 the move failed (the message says why and where the client is),
was refused (no such client or shard, already there, a move of it running: 409), a
non-admin key, an unreachable gateway; 2 bad usage.
`,
  options: { ...GATEWAY_OPTIONS },
  args: { min: 2, max: 2 },
  async run(parsed, io) {
    const [client, shard] = parsed.positionals as [string, string];
    const format = outputFormat(parsed, io);
    const gw = gatewayOf(parsed, io);
    const c = colours({ isTTY: io.stderrIsTTY === true, env: io.env });
    let move = await apiOk<ShardMoveRecord>(io, gw, 'POST', '/v1/shards/moves', {
      client,
      shard,
    });
    const line = (m: ShardMoveRecord) =>
      `moving ${m.client} ${m.from} → ${m.to}: ${m.state}` +
      (m.state === 'draining' ? `, ${m.inFlight} call(s) in flight` : '') +
      (m.keysCopied > 0 ? `, ${m.keysCopied} key(s) copied` : '');
    while (move.state !== 'done' && move.state !== 'failed') {
      if (io.stderrIsTTY) io.err(`\r\x1b[2K${c.dim(line(move))}`);
      await new Promise((r) => setTimeout(r, POLL_MS));
      move = await apiOk<ShardMoveRecord>(io, gw, 'GET', `/v1/shards/moves/${move.id}`);
    }
    if (io.stderrIsTTY) io.err('\r\x1b[2K');
    renderOne(io, format, move, MOVE_FIELDS);
    if (move.state === 'failed')
      throw new ExitError(1, `toolgate: the move of ${client} failed: ${move.error ?? 'unknown'}`);
    return 0;
  },
};
