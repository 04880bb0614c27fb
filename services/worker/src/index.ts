export { createWorker } from './worker.js';
export { runTool } from './run-tool.js';
export type { ToolWorker, WorkerOptions } from './worker.js';
