import type { QueueKind } from './types.js';

/** Every Redis key and queue name toolgate uses, under one configurable prefix. */
export class Keys {
  constructor(readonly prefix: string) {}

  /** BullMQ queue name; BullMQ adds its own `bull:` prefix (set to ours). */
  queue(kind: QueueKind): string {
    return `calls-${kind}`;
  }

  /** BullMQ key prefix. */
  get bullPrefix(): string {
    return `${this.prefix}:bull`;
  }

  call(id: string): string {
    return `${this.prefix}:call:${id}`;
  }

  idempotency(clientId: string, key: string): string {
    return `${this.prefix}:idem:${clientId}:${key}`;
  }

  get workers(): string {
    return `${this.prefix}:workers`;
  }

  /** A gateway's own channel for outcomes of the calls it waits for. */
  reply(gatewayId: string): string {
    return `${this.prefix}:reply:${gatewayId}`;
  }

  /** One audit stream per client, each capped on its own: a flood evicts only its sender's history. */
  audit(clientId: string): string {
    return `${this.prefix}:audit:${clientId}`;
  }

  /** Set of the client ids that have an audit stream (the merged view reads each of them). */
  get auditClients(): string {
    return `${this.prefix}:audit-clients`;
  }

  /** Key prefix of the per-address counter of requests with a missing or unknown key. */
  get authFailures(): string {
    return `${this.prefix}:authfail`;
  }

  /** Sorted set of pending approvals, scored by expiry time. */
  get approvals(): string {
    return `${this.prefix}:approvals`;
  }

  cache(tool: string, digest: string): string {
    return `${this.prefix}:cache:${tool}:${digest}`;
  }

  /** Sorted set of live cache keys scored by expiry, for key counts and eviction counts. */
  get cacheIndex(): string {
    return `${this.prefix}:cache-index`;
  }

  stat(kind: 'tool' | 'durations', tool: string): string {
    return `${this.prefix}:stats:${kind}:${tool}`;
  }

  stats(kind: 'tools' | 'recent' | 'slowest' | 'cache'): string {
    return `${this.prefix}:stats:${kind}`;
  }
}
