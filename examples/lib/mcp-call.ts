/**
 * One long tool call over MCP with the official TypeScript SDK (the client most MCP hosts
 * embed): the tool's output arrives as log messages and its progress as progress
 * notifications while it runs; aborting the signal sends `notifications/cancelled`, and
 * toolgate kills the call's sandbox.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  LoggingMessageNotificationSchema,
  type CallToolResult,
} from '@modelcontextprotocol/sdk/types.js';
import type { Toolgate } from './toolgate.ts';

export interface McpCallOptions {
  /** A line of the tool's output (stdout at level info, stderr at warning). */
  onOutput?: (level: string, text: string) => void;
  onProgress?: (progress: number, total?: number) => void;
  /** Aborting cancels the call (the SDK sends notifications/cancelled). */
  signal?: AbortSignal;
}

/** What the tool answered (text content, and structuredContent for tools with a result schema). */
export type McpCallResult =
  { cancelled: false; isError: boolean; text: string; structured?: unknown } | { cancelled: true };

export async function callOverMcp(
  tg: Toolgate,
  tool: string,
  args: Record<string, unknown>,
  options: McpCallOptions = {},
): Promise<McpCallResult> {
  const client = new Client({ name: 'toolgate-example', version: '1.0.0' });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) =>
    options.onOutput?.(n.params.level, String(n.params.data)),
  );
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', tg.url), {
    requestInit: { headers: { authorization: `Bearer ${tg.key}` } },
  });
  // The SDK sends notifications/cancelled without waiting for it, and close() aborts whatever
  // is still being sent: keep the notifications in flight, and let them go out first.
  const sending = new Set<Promise<void>>();
  const send = transport.send.bind(transport);
  transport.send = (message, sendOptions) => {
    const sent = send(message, sendOptions);
    if (!('id' in message)) {
      sending.add(sent);
      void sent.catch(() => undefined).finally(() => sending.delete(sent));
    }
    return sent;
  };
  await client.connect(transport);
  try {
    // 2025-era clients choose how much they hear; toolgate keeps it per key for every replica.
    await client.setLoggingLevel('info');
    const result = (await client.callTool({ name: tool, arguments: args }, CallToolResultSchema, {
      onprogress: (p) => options.onProgress?.(p.progress, p.total),
      // Progress resets the timeout: toolgate sends some at least every 2 s while a call runs.
      timeout: 60_000,
      resetTimeoutOnProgress: true,
      ...(options.signal ? { signal: options.signal } : {}),
    })) as CallToolResult;
    const text = result.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('');
    return {
      cancelled: false,
      isError: result.isError === true,
      text,
      ...(result.structuredContent ? { structured: result.structuredContent } : {}),
    };
  } catch (err) {
    if (options.signal?.aborted) return { cancelled: true };
    throw err;
  } finally {
    await Promise.allSettled([...sending]);
    await client.close();
  }
}
