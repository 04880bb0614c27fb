import { waitReady, type Keys } from '@toolgate/calls';
import type { RedisClient } from '@toolgate/calls';
import type { ApprovalEvent } from './api-types.js';

type Listener = (event: ApprovalEvent) => void;

/**
 * Approval changes for the console's live list (`GET /v1/approvals/events`): published on one
 * Redis channel by whichever gateway parks, decides, expires or cancels a call, and heard by
 * every gateway on the subscriber connection it already has (subscribed while anyone listens).
 */
export class ApprovalFeed {
  private readonly listeners = new Set<Listener>();

  constructor(
    private readonly redis: RedisClient,
    private readonly subscriber: RedisClient,
    private readonly keys: Keys,
  ) {
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== keys.approvalEvents || this.listeners.size === 0) return;
      let event: ApprovalEvent;
      try {
        event = JSON.parse(message) as ApprovalEvent;
      } catch {
        return;
      }
      for (const listener of [...this.listeners]) listener(event);
    });
  }

  async publish(event: ApprovalEvent): Promise<void> {
    await this.redis.publish(this.keys.approvalEvents, JSON.stringify(event));
  }

  async subscribe(listener: Listener): Promise<() => void> {
    this.listeners.add(listener);
    if (this.listeners.size === 1) {
      await waitReady(this.subscriber, 5000);
      await this.subscriber.subscribe(this.keys.approvalEvents);
    }
    return () => {
      if (!this.listeners.delete(listener) || this.listeners.size > 0) return;
      this.subscriber.unsubscribe(this.keys.approvalEvents).catch(() => undefined);
    };
  }
}
