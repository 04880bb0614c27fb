/** What an upstream tool's handler reaches through `ctx.services.upstreams`: the worker's connections. */
import { isStdioUpstream, type UpstreamConfig } from '@toolgate/config';
import { ToolError, type ToolContext } from '@toolgate/registry';
import type { GuardedFetch } from '@toolgate/tools';
import { UpstreamConnection } from './connection.js';
import type { StdioServers } from './stdio-server.js';
import type { ServerRequestLogger } from './server-requests.js';

declare module '@toolgate/registry' {
  interface ToolServices {
    /** Only on workers of a config with `upstreams:`. */
    upstreams?: UpstreamCalls;
  }
}

/** One connection per upstream, made on first call and reused (per worker process). */
export class UpstreamCalls {
  private readonly connections = new Map<string, UpstreamConnection>();
  private readonly byId: Map<string, UpstreamConfig>;

  constructor(
    upstreams: readonly UpstreamConfig[],
    private readonly fetchImpl: GuardedFetch,
    /** This worker's stdio upstreams; without them (no sandbox driver) those calls fail. */
    private readonly stdio?: StdioServers,
    /** Where requests an upstream sent past its serverRequests bounds are counted. */
    private readonly log?: ServerRequestLogger,
  ) {
    this.byId = new Map(upstreams.map((u) => [u.id, u]));
  }

  connection(id: string): UpstreamConnection {
    let connection = this.connections.get(id);
    if (!connection) {
      const upstream = this.byId.get(id);
      if (!upstream)
        throw new ToolError('upstream_unavailable', `no upstream "${id}" is configured`);
      if (isStdioUpstream(upstream) && !this.stdio?.get(id))
        throw new ToolError(
          'upstream_unavailable',
          `upstream "${id}" is a stdio server and this worker has no sandbox driver`,
        );
      connection = new UpstreamConnection(
        upstream,
        this.fetchImpl,
        undefined,
        this.stdio?.get(id),
        this.log,
      );
      this.connections.set(id, connection);
    }
    return connection;
  }

  async close(): Promise<void> {
    await Promise.all([...this.connections.values()].map((c) => c.close()));
    this.connections.clear();
    await this.fetchImpl.close();
  }
}

export function upstreamCalls(ctx: ToolContext): UpstreamCalls {
  const { upstreams } = ctx.services as Partial<ToolContext['services']>;
  if (!upstreams)
    throw new ToolError('upstream_unavailable', 'this worker has no upstreams configured');
  return upstreams;
}
