import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { ClientConfig, Config } from '@toolgate/config';
import { CLIENT_LIMIT_DEFAULTS, sha256 } from '@toolgate/config';
import { ToolScope, type Tool } from '@toolgate/registry';
import type { ApiError } from './errors.js';

/** Which tools a caller may see and call. */
export interface ToolFilter {
  allows(tool: Pick<Tool, 'name' | 'category'>): boolean;
}

/**
 * What an OAuth token may call (auth/oauth.ts's TokenGrant): its client's tools ∩ the tools of
 * its scopes, and the step-up answer for a tool only a scope is missing for.
 */
export interface Grant extends ToolFilter {
  readonly scopes: readonly string[];
  /** The scopes held that this server configures. */
  configured(): string[];
  /** The 403 to answer when only a scope is missing for `tool`; undefined otherwise. */
  stepUp(tool: Pick<Tool, 'name' | 'category'>): ApiError | undefined;
  /** The 403 for an admin route: the admin scope, where the client is an admin; else none. */
  adminStepUp(): ApiError | undefined;
}

export interface Client {
  id: string;
  admin: boolean;
  scope: ToolFilter;
  /** The user a client signed in with an OAuth token acts for (the token's user claim). */
  user?: string;
  /** The user's groups (the token's `policy.cedar.groupsClaim`), for Cedar policies. */
  groups?: readonly string[];
  /** Set when the client signed in with an OAuth token: its scopes (docs/auth.md). */
  grant?: Grant;
  rateLimitPerMinute: number;
  /** Fair share of the workers (docs/scheduling.md). */
  limits: { queued: number; sandboxInFlight: number; pendingApprovals: number; sessions: number };
  /** One user's share of the client's (docs/auth.md, users); absent: the client's only. */
  perUser: {
    rateLimitPerMinute?: number;
    queued?: number;
    sessions?: number;
    streams?: number;
    sandboxInFlight?: number;
  };
  /** Whose workspace and memory calls use: the client's, or each user's own. */
  isolation: 'client' | 'user';
}

/**
 * The clients allowed in. Keys are only held as SHA-256 digests; a presented key is hashed
 * and compared in constant time.
 */
export class Clients {
  private readonly byHash = new Map<string, { digest: Buffer; client: Client }>();
  private readonly all = new Map<string, Client>();

  constructor(configs: readonly ClientConfig[]) {
    for (const c of configs) {
      const client: Client = {
        id: c.id,
        admin: c.admin,
        scope: new ToolScope(c.tools),
        rateLimitPerMinute: c.rateLimit.perMinute,
        limits: {
          queued: c.limits.queued,
          sandboxInFlight: c.limits.sandboxInFlight,
          pendingApprovals: c.limits.pendingApprovals,
          sessions: c.limits.sessions,
        },
        perUser: {
          ...(c.limits.perUser?.rateLimit
            ? { rateLimitPerMinute: c.limits.perUser.rateLimit.perMinute }
            : {}),
          ...(c.limits.perUser?.queued === undefined ? {} : { queued: c.limits.perUser.queued }),
          ...(c.limits.perUser?.sessions === undefined
            ? {}
            : { sessions: c.limits.perUser.sessions }),
          ...(c.limits.perUser?.streams === undefined ? {} : { streams: c.limits.perUser.streams }),
          ...(c.limits.perUser?.sandboxInFlight === undefined
            ? {}
            : { sandboxInFlight: c.limits.perUser.sandboxInFlight }),
        },
        isolation: c.isolation,
      };
      this.all.set(c.id, client);
      // A client without a key signs in with OAuth tokens only.
      const hex = c.keySha256;
      if (hex !== undefined) this.byHash.set(hex, { digest: Buffer.from(hex, 'hex'), client });
    }
  }

  get size(): number {
    return this.all.size;
  }

  /** The configured client ids. */
  get ids(): ReadonlySet<string> {
    return new Set(this.all.keys());
  }

  /** The configured client with this id (a token's client claim, a code-mode capability). */
  byId(id: string): Client | undefined {
    return this.all.get(id);
  }

  /** Each client's `limits.pendingApprovals` (the console shows counts against them). */
  get pendingLimits(): ReadonlyMap<string, number> {
    return new Map([...this.all.values()].map((c) => [c.id, c.limits.pendingApprovals]));
  }

  authenticate(key: string): Client | undefined {
    const hex = sha256(key);
    const entry = this.byHash.get(hex);
    if (!entry) return undefined;
    return timingSafeEqual(entry.digest, Buffer.from(hex, 'hex')) ? entry.client : undefined;
  }
}

/**
 * Who a request acts as, as recorded in `by` of decisions and audit entries: the client, and
 * the user its token names (`ops:alice`; client ids hold no `:`).
 */
export function actorOf(client: Pick<Client, 'id' | 'user'>): string {
  return client.user === undefined ? client.id : `${client.id}:${client.user}`;
}

export interface DevMode {
  key: string;
}

/**
 * With no clients configured, the gateway runs in development mode: one admin key made up
 * at start (printed once), loopback only.
 */
export function resolveClients(config: Config): { clients: Clients; dev?: DevMode } {
  if (config.clients.length > 0) return { clients: new Clients(config.clients) };
  const key = `tg_dev_${randomBytes(24).toString('base64url')}`;
  const dev: ClientConfig = {
    id: 'dev',
    keySha256: sha256(key),
    tools: ['*'],
    admin: true,
    rateLimit: { perMinute: 6000 },
    limits: { ...CLIENT_LIMIT_DEFAULTS },
    isolation: 'client',
  };
  return { clients: new Clients([dev]), dev: { key } };
}
