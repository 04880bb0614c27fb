/** Who is asking an MCP request: set by the route (routes/mcp.ts), read by the server and tasks. */
import type { McpRequestContext } from '@modelcontextprotocol/server';
import type { Client } from '../clients.js';
import type { Prepaid } from '../policy/limits.js';

/** Who is asking, handed from the express route to the factory through `authInfo.extra`. */
export interface McpCaller {
  client: Client;
  prepaid?: Prepaid;
  conversationId?: string;
  /** The address the request came from (Cedar's `context.sourceIp`). */
  sourceIp?: string;
  /** A 2025-era request's `MCP-Protocol-Version` header. */
  protocolVersion?: string;
  /** Where the console is served (`<origin>`, the console at `/console/`): elicitation links. */
  consoleBase: string;
}

export function callerOf(ctx: McpRequestContext): McpCaller {
  const caller = ctx.authInfo?.extra?.['toolgate/caller'] as McpCaller | undefined;
  // The route always sets it; a request reaching the factory without it is a wiring bug.
  if (!caller) throw new Error('MCP request without an authenticated caller');
  return caller;
}
