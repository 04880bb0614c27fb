export { Keys } from './keys.js';
export { CallStore } from './store.js';
export { Dispatcher, failedOutcome } from './dispatcher.js';
export { Heartbeat, liveWorkers, WORKER_ALIVE_MS } from './heartbeat.js';
export { createRedis, waitReady, isRedisDown } from './redis.js';
export { FINAL_STATUSES } from './types.js';
export type {
  CallError,
  CallJob,
  CallOutcome,
  CallRecord,
  CallStatus,
  QueueKind,
} from './types.js';
