export { CallMeter } from './call-meter.js';
export { ToolError } from './errors.js';
export { ToolRegistry, RegistryError } from './registry.js';
export { ToolScope } from './scope.js';
export { defineTool, runPrecheck, spaceOf, DEFAULT_TIMEOUT_MS, TOOL_NAME } from './tool.js';
export { closeObjects } from './schema.js';
export {
  FOREIGN_PATTERN_LIMITS,
  PATTERN_SIZE_MAX,
  unenforceablePatterns,
} from './linear-regexp.js';
export { strictSchemaIssue, STRICT_LIMITS } from './strict.js';
export { fromStrictArguments, toStrictSchema } from './strict-form.js';
export { Type } from '@sinclair/typebox';

export type {
  AnyToolSpec,
  HandlerResult,
  PrecheckContext,
  Risk,
  SandboxNeeds,
  Tool,
  ToolContext,
  CallCredentials,
  RequestOrigin,
  ToolEvents,
  ToolServices,
  ToolSpec,
} from './tool.js';
export type { ListOptions, ResultCheck, ValidationResult } from './registry.js';
export type { ValidationIssue } from './schema.js';
export type { UnenforcedPattern } from './linear-regexp.js';
export type { StrictForm } from './strict-form.js';
export type { Static, TObject, TSchema } from '@sinclair/typebox';
