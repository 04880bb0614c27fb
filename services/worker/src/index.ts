export { createWorker } from './worker.js';
export { startWorker } from './start.js';
export { runTool } from './run-tool.js';
export { createResultChecker, MISMATCH_LOG_INTERVAL_MS } from './result-check.js';
export type { ResultChecker } from './result-check.js';
export type { ToolWorker, WorkerOptions } from './worker.js';
export { openClientStores } from './client-stores.js';
export type { ClientStores } from './client-stores.js';
