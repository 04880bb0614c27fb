import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { ClientConfig, Config } from '@toolgate/config';
import { CLIENT_LIMIT_DEFAULTS, sha256 } from '@toolgate/config';
import { ToolScope } from '@toolgate/registry';

export interface Client {
  id: string;
  admin: boolean;
  scope: ToolScope;
  rateLimitPerMinute: number;
  /** Fair share of the workers (docs/scheduling.md). */
  limits: { queued: number; sandboxInFlight: number; pendingApprovals: number };
}

/**
 * The clients allowed in. Keys are only held as SHA-256 digests; a presented key is hashed
 * and compared in constant time.
 */
export class Clients {
  private readonly byHash = new Map<string, { digest: Buffer; client: Client }>();

  constructor(configs: readonly ClientConfig[]) {
    for (const c of configs) {
      const hex = c.keySha256!;
      this.byHash.set(hex, {
        digest: Buffer.from(hex, 'hex'),
        client: {
          id: c.id,
          admin: c.admin,
          scope: new ToolScope(c.tools),
          rateLimitPerMinute: c.rateLimit.perMinute,
          limits: {
            queued: c.limits.queued,
            sandboxInFlight: c.limits.sandboxInFlight,
            pendingApprovals: c.limits.pendingApprovals,
          },
        },
      });
    }
  }

  get size(): number {
    return this.byHash.size;
  }

  /** The configured client ids. */
  get ids(): ReadonlySet<string> {
    return new Set([...this.byHash.values()].map((e) => e.client.id));
  }

  /** Each client's `limits.pendingApprovals` (the console shows counts against them). */
  get pendingLimits(): ReadonlyMap<string, number> {
    return new Map(
      [...this.byHash.values()].map((e) => [e.client.id, e.client.limits.pendingApprovals]),
    );
  }

  /** The client with this id (a code-mode capability names its client by id). */
  byId(id: string): Client | undefined {
    for (const entry of this.byHash.values()) if (entry.client.id === id) return entry.client;
    return undefined;
  }

  authenticate(key: string): Client | undefined {
    const hex = sha256(key);
    const entry = this.byHash.get(hex);
    if (!entry) return undefined;
    return timingSafeEqual(entry.digest, Buffer.from(hex, 'hex')) ? entry.client : undefined;
  }
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
  };
  return { clients: new Clients([dev]), dev: { key } };
}
