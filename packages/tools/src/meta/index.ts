/** Tools about the tools (`@toolgate/tools/meta`). */
import type { AnyToolSpec } from '@toolgate/registry';
import { findTools } from './find-tools.js';

export const metaTools: AnyToolSpec[] = [findTools];

export { findTools, MAX_FIND_RESULTS } from './find-tools.js';
export { createToolCatalog } from './catalog.js';
export type { ToolCatalog, ToolMatch, ClientScope } from './catalog.js';
