import { toStrictSchema } from './schema.js';
import type { Tool } from './tool.js';

/** GET /tools: everything a client needs to know about a tool. */
export interface NativeTool {
  name: string;
  description: string;
  category: string;
  parameters: Record<string, unknown>;
  risk: Tool['risk'];
  requiresApproval: boolean;
  sandboxed: boolean;
  timeoutMs: number;
  cacheTtlSeconds: number;
}

export interface OpenAITool {
  type: 'function';
  function: {
    name: string;
    description: string;
    parameters: Record<string, unknown>;
    strict?: boolean;
  };
}

export interface AnthropicTool {
  name: string;
  description: string;
  input_schema: { type: 'object'; [key: string]: unknown };
}

/** `requiresApproval` may be widened by policy (config), so the caller passes the final word. */
export function toNative(tool: Tool, requiresApproval = tool.requiresApproval): NativeTool {
  return {
    name: tool.name,
    description: tool.description,
    category: tool.category,
    parameters: tool.parameters,
    risk: tool.risk,
    requiresApproval,
    sandboxed: tool.sandbox !== undefined,
    timeoutMs: tool.timeoutMs,
    cacheTtlSeconds: tool.cacheTtlSeconds,
  };
}

export function toOpenAI(tool: Tool, options: { strict?: boolean } = {}): OpenAITool {
  if (options.strict) {
    return {
      type: 'function',
      function: {
        name: tool.name,
        description: tool.description,
        parameters: toStrictSchema(tool.parameters),
        strict: true,
      },
    };
  }
  return {
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  };
}

export function toAnthropic(tool: Tool): AnthropicTool {
  return {
    name: tool.name,
    description: tool.description,
    input_schema: tool.parameters as AnthropicTool['input_schema'],
  };
}
