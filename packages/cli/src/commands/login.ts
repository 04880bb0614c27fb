/** `toolgate login` and `logout`: a gateway and its key kept in the profile, for every command. */
import { readFileSync } from 'node:fs';
import type { WhoAmI } from '@toolgate/gateway';
import { ExitError, UsageError, type CliIo, type Command } from '../command.js';
import {
  GATEWAY_HELP,
  GATEWAY_OPTIONS,
  api,
  apiErrorText,
  gatewayOf,
  outputFormat,
  DEFAULT_GATEWAY,
  profilePath,
  renderOne,
  writeProfile,
} from '../remote/index.js';

async function readProcessStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
    chunks.push(chunk);
    if (chunks.reduce((n, c) => n + c.length, 0) > 4096) break;
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Reads a line from the terminal without echoing it (raw mode); Ctrl-C gives up. */
function promptHidden(question: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(question);
  return new Promise((resolve, reject) => {
    let typed = '';
    const finish = (fn: () => void) => {
      stdin.removeListener('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
      fn();
    };
    const onData = (chunk: Buffer) => {
      for (const ch of chunk.toString('utf8')) {
        if (ch === '\r' || ch === '\n') return finish(() => resolve(typed));
        if (ch === '\u0003') return finish(() => reject(new ExitError(130)));
        if (ch === '\u007f' || ch === '\b') typed = typed.slice(0, -1);
        else if (ch >= ' ') typed += ch;
      }
    };
    stdin.setRawMode(true);
    stdin.resume();
    stdin.on('data', onData);
  });
}

async function readKey(io: CliIo): Promise<string> {
  if (io.readStdin) return io.readStdin();
  if (process.stdin.isTTY) return promptHidden('key: ');
  return readProcessStdin();
}

export const loginCommand: Command = {
  name: 'login',
  summary: 'keep a gateway and its key in your profile (mode 0600) for every command',
  help: `usage: toolgate login [--gateway <url>] [-o table|json|yaml]

  Reads the key from stdin (\`toolgate login --gateway URL < key-file\`), or asks for it without
  echoing it on a terminal, checks it with the gateway (GET /v1/me) and stores the gateway and
  the key in the profile, $XDG_CONFIG_HOME/toolgate/profile.json (~/.config/toolgate/…), mode
  0600 in a 0700 folder. Then every command talks to that gateway with that key, unless
  --gateway, --key, TOOLGATE_GATEWAY or TOOLGATE_KEY say otherwise (the key is sent only to the
  profile's gateway). Prints who the key is.

${GATEWAY_HELP}

Exit codes: 0 logged in, 1 the gateway refused the key or cannot be reached (nothing stored),
2 bad usage (no key given).
`,
  options: { ...GATEWAY_OPTIONS },
  args: { min: 0, max: 0 },
  async run(parsed, io) {
    const format = outputFormat(parsed, io);
    const { url } = gatewayOf(parsed, io);
    const key = (
      typeof parsed.values.key === 'string' ? parsed.values.key : await readKey(io)
    ).trim();
    if (key === '')
      throw new UsageError('toolgate login: no key given (on stdin or at the prompt)');
    const gw = { url, key, headers: { authorization: `Bearer ${key}` } };
    const answer = await api(io, gw, 'GET', '/v1/me');
    if (answer.status !== 200) throw new ExitError(1, apiErrorText(answer.status, answer.body));
    const me = answer.body as WhoAmI;
    const path = writeProfile(io.env, { gateway: url, key });
    const who = {
      gateway: url,
      client: me.client,
      admin: me.admin,
      ...(me.user ? { user: me.user } : {}),
      profile: path,
    };
    if (format !== 'table') renderOne(io, format, who, []);
    else
      io.out(
        `logged in to ${url} as client ${me.client}${me.user ? ` (user ${me.user})` : ''}${me.admin ? ', an admin' : ''}; the key is in ${path} (mode 0600)\n`,
      );
    return 0;
  },
};

export const logoutCommand: Command = {
  name: 'logout',
  summary: 'remove the key from your profile',
  help: `usage: toolgate logout

  Removes the key from the profile (the gateway stays, for \`toolgate login\` again). A key set
  in TOOLGATE_KEY is not touched.

Exit codes: 0 logged out (or there was no key), 2 bad usage.
`,
  args: { min: 0, max: 0 },
  async run(_parsed, io) {
    const path = profilePath(io.env);
    // Read without the permission check: a profile others could read loses its key all the more.
    let profile: { gateway?: unknown; key?: unknown } | undefined;
    try {
      profile = JSON.parse(readFileSync(path, 'utf8')) as typeof profile;
    } catch {
      profile = undefined;
    }
    if (!profile?.key) {
      io.out(`no key stored in ${path}\n`);
      return 0;
    }
    const gateway = typeof profile.gateway === 'string' ? profile.gateway : DEFAULT_GATEWAY;
    writeProfile(io.env, { gateway });
    io.out(`logged out of ${gateway}: the key is removed from ${path}\n`);
    return 0;
  },
};
