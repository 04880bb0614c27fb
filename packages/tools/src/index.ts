import { ToolRegistry, type AnyToolSpec } from '@toolgate/registry';
import { calculator, evaluate } from './builtin/calculator.js';
import { currentTime } from './builtin/current-time.js';
import { sandboxedTools } from './sandboxed/index.js';

/** The in-process built-in tools (SPEC §4). */
export const builtinTools: AnyToolSpec[] = [calculator, currentTime, ...sandboxedTools];

/** A registry with every built-in tool, plus `extra` (tests, plugins). */
export function createToolRegistry(extra: readonly AnyToolSpec[] = []): ToolRegistry {
  const registry = new ToolRegistry();
  registry.registerAll(builtinTools);
  registry.registerAll(extra);
  return registry;
}

export { calculator, currentTime, evaluate, sandboxedTools };
