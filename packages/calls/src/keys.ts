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

  /** A BullMQ job's hash (the worker counts fairness deferrals in it). */
  bullJob(kind: QueueKind, id: string): string {
    return `${this.bullPrefix}:${this.queue(kind)}:${id}`;
  }

  /** Sorted set of a client's calls accepted and not yet finished in one queue, scored by accept time. */
  inFlight(clientId: string, kind: QueueKind): string {
    return `${this.prefix}:inflight:${clientId}:${kind}`;
  }

  /** Sorted set of a client's calls running now in one queue (worker leases), scored by lease expiry. */
  running(clientId: string, kind: QueueKind): string {
    return `${this.prefix}:running:${clientId}:${kind}`;
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

  get audit(): string {
    return `${this.prefix}:audit`;
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
