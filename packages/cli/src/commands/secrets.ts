/**
 * `toolgate secrets set|list|delete` (a running gateway's admin API: the value goes from stdin
 * to the gateway, which seals it) and `toolgate secrets rotate` (straight to Redis with the
 * config's keys: re-seals every value with the current key). docs/credentials.md.
 */
import path from 'node:path';
import { ConfigError, ShardMap, loadConfig } from '@toolgate/config';
import { Keys, createRedis, waitReady } from '@toolgate/calls';
import { KeyRing, MAX_SECRET_BYTES, SecretConfigError, SecretStore } from '@toolgate/secrets';
import { UsageError, type Command, type Parsed } from '../command.js';
import {
  CONNECTION_HELP,
  CONNECTION_OPTIONS,
  connection,
  printApiError,
  request,
} from './remote.js';

const USER_OPTION = { user: { type: 'string' } } as const;

function secretPath(parsed: Parsed, client: string, name?: string): string {
  const user = typeof parsed.values.user === 'string' ? parsed.values.user : undefined;
  if (user === '') throw new UsageError('toolgate secrets: --user must not be empty');
  const base = `/v1/secrets/${encodeURIComponent(client)}${name === undefined ? '' : `/${encodeURIComponent(name)}`}`;
  return user === undefined ? base : `${base}?user=${encodeURIComponent(user)}`;
}

async function readProcessStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
    chunks.push(chunk);
    bytes += chunk.length;
    // Enough to tell "too long" without holding an unbounded input.
    if (bytes > MAX_SECRET_BYTES + 2) break;
  }
  return Buffer.concat(chunks).toString('utf8');
}

export const secretsSetCommand: Command = {
  name: 'secrets set',
  summary: "store a client's (or a user's) secret, the value read from stdin",
  help: `usage: toolgate secrets set <client> [--user <sub>] <name> < value-file

  Reads the value from standard input (never from the command line, where ps and shell
  history would keep it; one trailing newline is dropped) and stores it sealed
  (PUT /v1/secrets/<client>/<name>[?user=<sub>]; an admin key). A credential rule's
  \${secret:<name>} then uses it; a user's own secret comes before the client's.
  Names: a letter or "_", then letters, digits, "_", "." or "-", at most 64. Values: at most
  16 KiB. At most 256 secrets per client (and per user of a client).

  --user <sub>  the user's secret instead of the client's
${CONNECTION_HELP}

Exit codes: 0 stored, 1 refused or the gateway cannot be reached, 2 bad usage.

Example: printf %s "$GITHUB_TOKEN" | toolgate secrets set assistant-a github_token
`,
  options: { ...CONNECTION_OPTIONS, ...USER_OPTION },
  args: { min: 2, max: 2 },
  async run(parsed, io) {
    const [client, name] = parsed.positionals as [string, string];
    let value = await (io.readStdin ?? readProcessStdin)();
    value = value.replace(/\r?\n$/, '');
    if (value === '') throw new UsageError('toolgate secrets set: no value on standard input');
    const { url, headers } = connection(parsed, io);
    const res = await request(io, url + secretPath(parsed, client, name), {
      method: 'PUT',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ value }),
    });
    if (!res) return 1;
    if (res.status !== 200 && res.status !== 201) {
      printApiError(io, res.status, res.body);
      return 1;
    }
    io.out(`${res.status === 201 ? 'stored' : 'replaced'} ${name} for ${client}\n`);
    return 0;
  },
};

export const secretsListCommand: Command = {
  name: 'secrets list',
  summary: "list a client's (or a user's) secret names and update times, never values",
  help: `usage: toolgate secrets list <client> [--user <sub>] [--json]

  Names and last update times (GET /v1/secrets/<client>[?user=<sub>]; an admin key).

  --user <sub>  the user's secrets instead of the client's
  --json        print the gateway's answer
${CONNECTION_HELP}

Exit codes: 0 listed, 1 refused or the gateway cannot be reached, 2 bad usage.
`,
  options: { ...CONNECTION_OPTIONS, ...USER_OPTION, json: { type: 'boolean', default: false } },
  args: { min: 1, max: 1 },
  async run(parsed, io) {
    const [client] = parsed.positionals as [string];
    const { url, headers } = connection(parsed, io);
    const res = await request(io, url + secretPath(parsed, client), { headers });
    if (!res) return 1;
    if (res.status !== 200) {
      printApiError(io, res.status, res.body);
      return 1;
    }
    if (parsed.values.json) {
      io.out(`${JSON.stringify(res.body, null, 2)}\n`);
      return 0;
    }
    for (const s of (res.body as { secrets: { name: string; updatedAt: string }[] }).secrets)
      io.out(`${s.name}  ${s.updatedAt}\n`);
    return 0;
  },
};

export const secretsDeleteCommand: Command = {
  name: 'secrets delete',
  summary: "delete a client's (or a user's) secret",
  help: `usage: toolgate secrets delete <client> [--user <sub>] <name>

  DELETE /v1/secrets/<client>/<name>[?user=<sub>] (an admin key).

  --user <sub>  the user's secret instead of the client's
${CONNECTION_HELP}

Exit codes: 0 deleted, 1 no such secret, refused, or the gateway cannot be reached, 2 bad usage.
`,
  options: { ...CONNECTION_OPTIONS, ...USER_OPTION },
  args: { min: 2, max: 2 },
  async run(parsed, io) {
    const [client, name] = parsed.positionals as [string, string];
    const { url, headers } = connection(parsed, io);
    const res = await request(io, url + secretPath(parsed, client, name), {
      method: 'DELETE',
      headers,
    });
    if (!res) return 1;
    if (res.status !== 204) {
      printApiError(io, res.status, res.body);
      return 1;
    }
    io.out(`deleted ${name} for ${client}\n`);
    return 0;
  },
};

export const secretsRotateCommand: Command = {
  name: 'secrets rotate',
  summary: 're-seal every stored secret with the current secrets key',
  help: `usage: toolgate secrets rotate [--config <file>]

  After a new key is made current (secrets.keyFile or TOOLGATE_SECRETS_KEY) with the old one
  in secrets.previousKeyFiles: re-seals, in Redis, every value sealed with another key. Once it
  reports 0 unreadable, the old key can be removed from the config.

  --config <file>  the config file (default: $TOOLGATE_CONFIG)

Exit codes: 0 done, 1 some values open with no configured key, or Redis is unreachable,
2 bad usage or an invalid config.
`,
  options: { config: { type: 'string', short: 'c' } },
  args: { min: 0, max: 0 },
  async run({ values }, io) {
    const file =
      typeof values.config === 'string'
        ? path.resolve(io.cwd, values.config)
        : io.env.TOOLGATE_CONFIG;
    let config;
    let ring;
    try {
      config = loadConfig(io.env, file);
      ring = KeyRing.load(config.secrets);
    } catch (err) {
      if (!(err instanceof ConfigError) && !(err instanceof SecretConfigError)) throw err;
      io.err(`toolgate secrets rotate: ${err.message}\n`);
      return 2;
    }
    if (!ring) {
      io.err(
        'toolgate secrets rotate: no secrets key is configured (secrets.keyFile or TOOLGATE_SECRETS_KEY)\n',
      );
      return 2;
    }
    // Each client's secrets are on its shard (docs/sharding.md): every shard is re-sealed.
    const shards = new ShardMap(config).list;
    const total = { resealed: 0, owners: 0, unreadable: 0 };
    for (const shard of shards) {
      const redis = createRedis(shard.redis, 'command');
      try {
        await waitReady(redis);
        const result = await new SecretStore(redis, Keys.for(shard.redis), ring).rotate();
        if (shards.length > 1)
          io.out(
            `shard ${shard.id}: re-sealed ${result.resealed} secret(s) of ${result.owners} owner(s); ${result.unreadable} unreadable\n`,
          );
        total.resealed += result.resealed;
        total.owners += result.owners;
        total.unreadable += result.unreadable;
      } finally {
        redis.disconnect();
      }
    }
    io.out(
      `re-sealed ${total.resealed} secret(s) of ${total.owners} owner(s) with key ${ring.currentId}; ${total.unreadable} unreadable\n`,
    );
    return total.unreadable === 0 ? 0 : 1;
  },
};
