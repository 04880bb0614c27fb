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
}
