/** `toolgate keys new`: a client key and the config lines that admit it (only the hash is kept). */
import { randomBytes } from 'node:crypto';
import { checkConfig, sha256 } from '@toolgate/config';
import { UsageError, type Command } from '../command.js';

/** `tg_` + 32 random bytes: 256 bits, URL- and header-safe, recognisable in a leak scan. */
export function newKey(): string {
  return `tg_${randomBytes(32).toString('base64url')}`;
}

export const keysNewCommand: Command = {
  name: 'keys new',
  summary: 'print a new client key and the keySha256 line for the config',
  help: `usage: toolgate keys new [--client <id>] [--json]

  Prints a new random key (tg_ + 32 bytes, base64url) and the lines to add under "clients:" in
  the config. The config keeps only the key's SHA-256 (keySha256), so the key is shown once:
  hand it to the assistant (its Authorization: Bearer header) and keep no other copy.

  --client <id>  the client id for the config lines (default: my-client)
  --json         print {"client", "key", "keySha256"} instead

Exit codes: 0 printed, 2 bad usage (e.g. an id the config would refuse).
`,
  options: {
    client: { type: 'string', short: 'c' },
    json: { type: 'boolean', default: false },
  },
  args: { min: 0, max: 0 },
  async run({ values }, io) {
    const client = typeof values.client === 'string' ? values.client : 'my-client';
    const key = newKey();
    const hash = sha256(key);
    // The config's own rules decide what an id may be.
    const problem = checkConfig({ clients: [{ id: client, keySha256: hash }] }).problems[0];
    if (problem) {
      throw new UsageError(
        `toolgate keys new: "${client}" is not a valid client id (${problem.message})`,
      );
    }
    if (values.json) {
      io.out(`${JSON.stringify({ client, key, keySha256: hash })}\n`);
      return 0;
    }
    io.out(
      [
        `key: ${key}`,
        '',
        '# Add under "clients:" in the toolgate config (only the hash is stored):',
        `  - id: ${client}`,
        `    keySha256: ${hash}`,
        '',
      ].join('\n'),
    );
    return 0;
  },
};
