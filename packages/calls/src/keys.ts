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

  /** Hash client id → reset generation of its workspace (see WorkspaceResets). */
  get workspaceResets(): string {
    return `${this.prefix}:workspace-resets`;
  }

  stat(kind: 'tool' | 'durations', tool: string): string {
    return `${this.prefix}:stats:${kind}:${tool}`;
  }

  stats(kind: 'tools' | 'recent' | 'slowest' | 'cache'): string {
    return `${this.prefix}:stats:${kind}`;
  }
}
