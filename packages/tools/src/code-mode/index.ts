/** Code mode (docs/code-mode.md): scripts that call the client's tools through the gateway. */
import type { AnyToolSpec } from '@toolgate/registry';
import { runCodeWithTools } from './tool.js';
import './services.js';

export const codeModeTools: AnyToolSpec[] = [runCodeWithTools];

export { runCodeWithTools, describeFor, MAX_DESCRIPTION_CHARS } from './tool.js';
export { runWithTools } from './script.js';
export { pythonModule, pythonName, BOOTSTRAP } from './python-module.js';
export { ScriptChannel, MAX_REQUEST_BYTES, MAX_CONNECTIONS } from './channel-server.js';
export type { CodeModeServices, CodeModeSession, NestedOutcome, ScriptTool } from './services.js';
