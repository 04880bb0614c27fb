/** Which gateway a command talks to, and with which key: flags, then env, then the profile. */
import type { CliIo, Parsed } from '../command.js';
import { readProfile } from './profile.js';

export const DEFAULT_GATEWAY = 'http://127.0.0.1:8080';

export const GATEWAY_OPTIONS = {
  gateway: { type: 'string' },
  /** The older spelling of --gateway, kept for scripts. */
  url: { type: 'string' },
  key: { type: 'string' },
  output: { type: 'string', short: 'o' },
} as const;

export const GATEWAY_HELP = `  -o, --output <fmt>  table, json or yaml (default: table on a terminal, json otherwise)
  --gateway <url>     the gateway (default: $TOOLGATE_GATEWAY, the profile, else ${DEFAULT_GATEWAY});
                      --url is the same
  --key <key>         the key (default: $TOOLGATE_KEY, else the profile's for its gateway)`;

export interface Gateway {
  url: string;
  key?: string;
  headers: Record<string, string>;
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function trimmed(url: string): string {
  return url.replace(/\/+$/, '');
}

/**
 * The gateway URL: --gateway/--url, $TOOLGATE_GATEWAY/$TOOLGATE_URL, the profile, the default.
 * The key: --key, $TOOLGATE_KEY, else the profile's — only when talking to the profile's gateway,
 * so `--gateway https://elsewhere` never sends it the stored key.
 */
export function gatewayOf(parsed: Parsed, io: Pick<CliIo, 'env' | 'err'>): Gateway {
  const given =
    text(parsed.values.gateway) ??
    text(parsed.values.url) ??
    text(io.env.TOOLGATE_GATEWAY) ??
    text(io.env.TOOLGATE_URL);
  const explicitKey = text(parsed.values.key) ?? text(io.env.TOOLGATE_KEY);
  // The profile is read only when it would be used (no stray warning for a fully given command).
  const profile = given !== undefined && explicitKey !== undefined ? undefined : readProfile(io);
  const url = trimmed(given ?? profile?.gateway ?? DEFAULT_GATEWAY);
  const key =
    explicitKey ?? (profile && trimmed(profile.gateway) === url ? profile.key : undefined);
  return {
    url,
    ...(key ? { key } : {}),
    headers: key ? { authorization: `Bearer ${key}` } : {},
  };
}
