export { UpstreamCatalog, CATALOG_LIMITS } from './catalog.js';
export { UpstreamCalls, upstreamCalls } from './services.js';
export { UpstreamConnection, MAX_RESPONSE_BYTES, CALL_META_KEY } from './connection.js';
export { upstreamToolSpec, resultOf, needsApproval } from './tool.js';

export type { UpstreamStatus, UpstreamState, CatalogLogger } from './catalog.js';
export type { UpstreamToolDefinition } from './tool.js';
export type { CallHooks } from './connection.js';
