/**
 * Which call an MCP request is running, so `notifications/cancelled` — a separate POST that
 * any gateway may receive — can cancel it. Keyed by client and JSON-RPC request id; two
 * requests of one client in flight with the same id (two sessions sharing a key) make the
 * entry ambiguous, and an ambiguous cancel is ignored rather than aimed at the wrong call.
 * Callers pass `principal(client, user)` as the client: each user of a client has its own
 * request ids, so two users' request 1 never make each other's entry ambiguous.
 */
import type { Keys } from '@toolgate/calls';
import type { RedisClient } from '@toolgate/calls';

const AMBIGUOUS = '?';

/** Deletes the entry only while it still names this call. */
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`;

export class McpRequests {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /** Remembers that `requestId` runs `callId`, for `ttlSeconds` (the call's longest wait). */
  async register(
    clientId: string,
    requestId: string | number,
    callId: string,
    ttlSeconds: number,
  ): Promise<void> {
    const key = this.keys.mcpRequest(clientId, String(requestId));
    const set = await this.redis.set(key, callId, 'EX', ttlSeconds, 'NX');
    if (set === null) await this.redis.set(key, AMBIGUOUS, 'EX', ttlSeconds);
  }

  async release(clientId: string, requestId: string | number, callId: string): Promise<void> {
    await this.redis.eval(RELEASE, 1, this.keys.mcpRequest(clientId, String(requestId)), callId);
  }

  /** The call a cancel for `requestId` means, if exactly one is known. */
  async lookup(clientId: string, requestId: string | number): Promise<string | undefined> {
    const callId = await this.redis.get(this.keys.mcpRequest(clientId, String(requestId)));
    return callId === null || callId === AMBIGUOUS ? undefined : callId;
  }
}
