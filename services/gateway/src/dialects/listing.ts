import { TOOL_NAME, ToolScope, type Tool } from '@toolgate/registry';
import { ApiError } from '../errors.js';
import type { ListingRequest } from './types.js';

/** Listing options the dialects share; each dialect reads only the ones it documents. */

/** `?<name>=true|false`, or undefined when absent. */
export function booleanOption(request: ListingRequest, name: string): boolean | undefined {
  const value = request.option(name);
  if (value === undefined) return undefined;
  if (value !== 'true' && value !== 'false')
    throw new ApiError('invalid_request', `"${name}" must be true or false`);
  return value === 'true';
}

/** `?<name>=` one of `allowed`, or undefined when absent. */
export function choiceOption<T extends string>(
  request: ListingRequest,
  name: string,
  allowed: readonly T[],
): T | undefined {
  const value = request.option(name);
  if (value === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(value))
    throw new ApiError('invalid_request', `"${name}" must be one of ${allowed.join(', ')}`);
  return value as T;
}

const MAX_PATTERNS = 1000;

/**
 * `?<name>=` a comma-separated selection of tools in the syntax of a client's `tools` scope:
 * `*`, tool names, `<prefix>*`, `category:<name>`. Each name and category must be one the client can see,
 * so a typo is an error rather than a silent no-op. Undefined when absent.
 */
export function toolSelection(
  request: ListingRequest,
  name: string,
): ((tool: Tool) => boolean) | undefined {
  const value = request.option(name);
  if (value === undefined) return undefined;
  const patterns = value.split(',').map((p) => p.trim());
  if (patterns.length > MAX_PATTERNS)
    throw new ApiError('invalid_request', `"${name}" takes at most ${MAX_PATTERNS} entries`);
  const names = new Set(request.visible.map((t) => t.name));
  const categories = new Set(request.visible.map((t) => t.category));
  for (const p of patterns) {
    if (p === '*') continue;
    const category = p.startsWith('category:') ? p.slice('category:'.length) : undefined;
    const prefix = category === undefined && p.endsWith('*') ? p.slice(0, -1) : undefined;
    const known =
      category !== undefined
        ? categories.has(category)
        : prefix !== undefined
          ? request.visible.some((t) => t.name.startsWith(prefix))
          : names.has(p);
    if (!known) {
      const what =
        category !== undefined
          ? `no tool you may use is in category "${category.slice(0, 64)}"`
          : prefix !== undefined && TOOL_NAME.test(prefix)
            ? `no tool you may use starts with "${prefix}"`
            : TOOL_NAME.test(p)
              ? `no tool you may use is named "${p}"`
              : `"${p.slice(0, 64)}" is not a tool name, "category:<name>" or "*"`;
      throw new ApiError('invalid_request', `"${name}": ${what}`);
    }
  }
  const scope = new ToolScope(patterns);
  return (tool) => scope.allows(tool);
}
