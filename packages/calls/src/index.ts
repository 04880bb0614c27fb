export { Keys } from './keys.js';
export { CallStore } from './store.js';
export { Dispatcher, failedOutcome } from './dispatcher.js';
export { Heartbeat, liveWorkers, WORKER_ALIVE_MS } from './heartbeat.js';
export { createRedis, waitReady, isRedisDown } from './redis.js';
export { Approvals } from './approvals.js';
export { AuditLog } from './audit.js';
export { ResultCache } from './cache.js';
export { Stats, percentile } from './stats.js';
export { maskText, redact } from './redact.js';
export type { Decision } from './approvals.js';
export type { AuditEntry, AuditQuery } from './audit.js';
export type { Cacheable } from './cache.js';
export type { CallSummary, StatsReport, ToolStats } from './stats.js';
export type {
  CallError,
  CallJob,
  CallOutcome,
  CallRecord,
  CallStatus,
  QueueKind,
} from './types.js';
