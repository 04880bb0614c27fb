/**
 * A `fetch` behind the SSRF guard, for clients that need a streaming Response (the MCP SDK's
 * Streamable HTTP transport reads Server-Sent Events from it): every request's host is checked
 * against policy.http like http_get's, and connections go only to the addresses checked.
 */
import { Agent, fetch as undiciFetch } from 'undici';
import {
  AddressGuard,
  parseHttpUrl,
  pinnedLookup,
  systemLookup,
  type AddressPolicy,
  type CheckedTarget,
  type LookupFunction,
} from './address-guard.js';

export type GuardedFetch = ((url: string | URL, init?: RequestInit) => Promise<Response>) & {
  /**
   * The same request through undici's own `request` API: the body a Node stream, no WHATWG
   * Request/Response/streams around it (a fraction of fetch's CPU per request, for hot paths).
   */
  request(url: string | URL, init: GuardedRequestInit): Promise<GuardedResponse>;
  /**
   * The same guard over agents of their own holding at most `connections` sockets per origin
   * (requests beyond wait their turn): for traffic a server could otherwise multiply, such as
   * the replies to an upstream's own requests. Closed on its own.
   */
  withConnectionLimit(connections: number): GuardedFetch;
  /** Closes the kept-alive connections. */
  close(): Promise<void>;
};

export interface GuardedRequestInit {
  method: 'GET' | 'POST' | 'DELETE';
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
}

export interface GuardedResponse {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
  /** Read it to its end (or destroy it): the connection goes back to the pool only then. */
  body: AsyncIterable<Buffer> & { destroy(err?: Error): unknown };
}

/**
 * Connections are kept alive per origin, on an Agent pinned to the addresses the guard
 * checked; a host that later resolves elsewhere gets a new Agent, checked again. Redirects are
 * never followed here (`redirect: 'manual'`): a caller that follows one calls again, and the
 * new host is checked like the first.
 */
export function createGuardedFetch(
  policy: AddressPolicy,
  options: { lookup?: LookupFunction } = {},
): GuardedFetch {
  return guardedFetchOver(new AddressGuard(policy, options.lookup ?? systemLookup));
}

function guardedFetchOver(guard: AddressGuard, connections?: number): GuardedFetch {
  const agents = new Map<string, { agent: Agent; addresses: string }>();
  const agentFor = (target: CheckedTarget): Agent => {
    const origin = target.url.origin;
    const addresses = target.addresses.map((a) => a.address).join(',');
    const kept = agents.get(origin);
    if (kept?.addresses === addresses) return kept.agent;
    void kept?.agent.close().catch(() => undefined);
    const agent = new Agent({
      connect: { lookup: pinnedLookup(target) },
      ...(connections === undefined ? {} : { connections }),
    });
    agents.set(origin, { agent, addresses });
    return agent;
  };
  const guarded = async (input: string | URL, init: RequestInit = {}): Promise<Response> => {
    const url = parseHttpUrl(String(input));
    const target = await guard.check(url, init.signal ?? new AbortController().signal);
    const response = await undiciFetch(url, {
      ...(init as Parameters<typeof undiciFetch>[1]),
      redirect: 'manual',
      dispatcher: agentFor(target),
    });
    return response as unknown as Response;
  };
  const request = async (
    input: string | URL,
    init: GuardedRequestInit,
  ): Promise<GuardedResponse> => {
    const url = parseHttpUrl(String(input));
    const target = await guard.check(url, init.signal);
    const { statusCode, headers, body } = await agentFor(target).request({
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: init.method,
      headers: init.headers,
      ...(init.body === undefined ? {} : { body: init.body }),
      signal: init.signal,
    });
    return { statusCode, headers, body };
  };
  return Object.assign(guarded, {
    request,
    withConnectionLimit: (limit: number) => guardedFetchOver(guard, limit),
    async close() {
      const all = [...agents.values()];
      agents.clear();
      await Promise.all(all.map(({ agent }) => agent.close().catch(() => undefined)));
    },
  });
}
