import { ToolRegistry, type AnyToolSpec } from '@toolgate/registry';
import { calculator, evaluate } from './builtin/calculator.js';
import { currentTime } from './builtin/current-time.js';
import { httpTools } from './http/index.js';
import { memoryTools } from './memory/index.js';
import { metaTools } from './meta/index.js';
import { sandboxedTools } from './sandboxed/index.js';
import { codeModeTools } from './code-mode/index.js';

/** The in-process built-in tools (docs/spec.md §4). */
export const builtinTools: AnyToolSpec[] = [
  calculator,
  currentTime,
  ...httpTools,
  ...sandboxedTools,
  ...codeModeTools,
  ...memoryTools,
  ...metaTools,
];

/** A registry with every built-in tool, plus `extra` (tests, plugins). */
export function createToolRegistry(extra: readonly AnyToolSpec[] = []): ToolRegistry {
  const registry = new ToolRegistry();
  registry.registerAll(builtinTools);
  registry.registerAll(extra);
  return registry;
}

export { calculator, currentTime, evaluate, sandboxedTools, httpTools };
export {
  createHttpServices,
  createGuardedFetch,
  startEgressProxy,
  EgressCa,
} from './http/index.js';
export { memoryTools, createMemoryStore, MemoryStore } from './memory/index.js';
export { metaTools, findTools, createToolCatalog } from './meta/index.js';
export type { ToolCatalog } from './meta/index.js';
export {
  runPython,
  runShell,
  fileRead,
  fileWrite,
  fileList,
  fileDelete,
  runInWorkspace,
  toToolError,
  ATTACHMENT_LIMITS,
  attachmentsOf,
  withoutAttachmentData,
} from './sandboxed/index.js';
export type { Attachment, OmittedAttachment } from './sandboxed/index.js';
export { checkShellCommand, shellPolicyError, POLICY_DENIED } from './policy/index.js';
export {
  codeModeTools,
  runCodeWithTools,
  pythonModule,
  ScriptChannel,
  MAX_REQUEST_BYTES,
} from './code-mode/index.js';
export type {
  CodeModeServices,
  CodeModeSession,
  NestedOutcome,
  ScriptTool,
} from './code-mode/index.js';
export type {
  EgressMeter,
  EgressProxy,
  EgressProxyOptions,
  GuardedFetch,
  GuardedRequestInit,
  GuardedResponse,
  HttpPolicy,
  HttpToolServices,
} from './http/index.js';
export type { ShellPolicy, ShellCheckResult } from './policy/index.js';
