/**
 * URL-mode elicitation (MCP 2025-11-25 and later) for a call whose credential rule names a
 * secret nobody set: instead of only an error the model reads, the client is sent to the
 * console's Connect page for that secret (docs/credentials.md). Only for clients that declared
 * `elicitation.url`: 2026-07-28 requests carry their capabilities; a 2025-era client declares
 * them once at `initialize`, which toolgate (keeping no MCP session) records per principal.
 */
import { CLIENT_CAPABILITIES_META_KEY } from '@modelcontextprotocol/server';
import type { CallOutcome, Keys, RedisClient } from '@toolgate/calls';

/** JSON-RPC error code of URLElicitationRequiredError (MCP 2025-11-25, "Elicitation"). */
export const URL_ELICITATION_REQUIRED = -32042;
/** The first protocol version with URL-mode elicitation. */
export const URL_ELICITATION_SINCE = '2025-11-25';
/** A recorded capability outlives an idle client by a day, as a 2025-era logging level does. */
const RECORD_TTL_SECONDS = 86_400;

/** What a URL-mode elicitation names (ElicitRequestURLParams without `_meta`/`task`). */
export interface UrlElicitation {
  mode: 'url';
  elicitationId: string;
  url: string;
  message: string;
  /** The secret it is for (not on the wire: the 2026 input request's key). */
  secret: string;
}

/** Protocol versions are dates (`YYYY-MM-DD`): their text order is their order. */
export function speaksUrlElicitation(version: string | undefined): boolean {
  return (
    version !== undefined && /^\d{4}-\d{2}-\d{2}$/.test(version) && version >= URL_ELICITATION_SINCE
  );
}

/** Whether a capabilities object declares URL-mode elicitation (`{"elicitation":{"url":{}}}`). */
export function declaresUrlElicitation(capabilities: unknown): boolean {
  const elicitation = isRecord(capabilities) ? capabilities['elicitation'] : undefined;
  return isRecord(elicitation) && isRecord(elicitation['url']);
}

/** The capabilities a 2026-07-28 request carries in its `_meta` (the SDK's `envelope`). */
export function requestCapabilities(meta: unknown): unknown {
  return isRecord(meta) ? meta[CLIENT_CAPABILITIES_META_KEY] : undefined;
}

export class UrlElicitationSupport {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /**
   * A 2025-era `initialize`: remembers whether this principal's client takes URL-mode
   * elicitation (the latest initialize wins: a client that stops declaring it is forgotten).
   */
  async initialized(principal: string, params: unknown): Promise<void> {
    const p = isRecord(params) ? params : {};
    const version = typeof p['protocolVersion'] === 'string' ? p['protocolVersion'] : undefined;
    const key = this.keys.mcpUrlElicitation(principal);
    if (speaksUrlElicitation(version) && declaresUrlElicitation(p['capabilities'])) {
      await this.redis.set(key, version!, 'EX', RECORD_TTL_SECONDS);
    } else {
      await this.redis.del(key);
    }
  }

  /** Whether a 2025-era request of this principal (its MCP-Protocol-Version) takes it. */
  async legacy(principal: string, headerVersion: string | undefined): Promise<boolean> {
    if (!speaksUrlElicitation(headerVersion)) return false;
    return (await this.redis.get(this.keys.mcpUrlElicitation(principal))) !== null;
  }
}

/** The console's Connect page for one secret of a client (or of one of its users). */
export function connectUrl(
  consoleBase: string,
  secret: string,
  client: string,
  user?: string,
): string {
  const parts = ['connect', client, secret, ...(user === undefined ? [] : [user])];
  return `${consoleBase.replace(/\/+$/, '')}/console/#/${parts.map(encodeURIComponent).join('/')}`;
}

/**
 * The elicitation a `credential_missing` outcome asks for, or undefined for any other outcome.
 * Its id is the call's: the client may show it beside the failed call.
 */
export function credentialElicitation(
  outcome: CallOutcome,
  consoleBase: string,
): UrlElicitation | undefined {
  if (outcome.status !== 'error' || outcome.error?.code !== 'credential_missing') return undefined;
  const details = outcome.error.details;
  if (!isRecord(details)) return undefined;
  const { secret, client, user, host } = details;
  if (typeof secret !== 'string' || typeof client !== 'string') return undefined;
  const forUser = typeof user === 'string' ? user : undefined;
  return {
    mode: 'url',
    secret,
    elicitationId: outcome.id,
    url: connectUrl(consoleBase, secret, client, forUser),
    message: `${typeof host === 'string' ? `Requests to ${host}` : 'This tool'} need the secret "${secret}", which is not set${
      forUser === undefined ? '' : ` for you`
    }. Open the link to set it (an administrator signs in there), then try again.`,
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
