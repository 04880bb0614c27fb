export { Keys, isCallId, principal } from './keys.js';
export type { QueueName } from './keys.js';
export { SessionStore, SESSION_TOOLS, sessionLostOutcome } from './sessions.js';
export type { SessionCreate, SessionInfo, SessionRecord, SessionTool } from './sessions.js';
export { CallStore, BRIEF_MAX_BYTES, briefOf, finishedRecord } from './store.js';
export type { LegacyBudget } from './store.js';
export { capOutcome } from './result-cap.js';
export { Dispatcher, failedOutcome } from './dispatcher.js';
export {
  Heartbeat,
  liveWorkers,
  warmSandboxes,
  workerAlive,
  WORKER_ALIVE_MS,
} from './heartbeat.js';
export {
  createRedis,
  describeRedis,
  waitReady,
  isRedisDown,
  isConnectionLost,
  DEFAULT_REDIS_URL,
} from './redis.js';
export type { RedisClient, RedisTarget } from './redis.js';
export { ReplicaWait } from './replicas.js';
export type { Replication } from './replicas.js';
export { Admission, fairPriority, MAX_PRIORITY } from './admission.js';
export { RunLeases } from './leases.js';
export { ConnectionBudget } from './connection-budget.js';
export { Approvals, cancelledOutcome } from './approvals.js';
export { AuditLog } from './audit.js';
export { CodeModeCapabilities } from './code-mode.js';
export type { CodeModeGrant, CodeModeTake } from './code-mode.js';
export { ResultCache, canonicalDigest } from './cache.js';
export { Stats, StatsBatch, percentile, USER_STATS_MAX, USER_STATS_SHOWN } from './stats.js';
export { maskText, redact, redactValues } from './redact.js';
export { WorkspaceResets, clientOfSpace, shardedResets } from './workspace-resets.js';
export type { ScheduledReset } from './workspace-resets.js';
export type { ConnectionBudgetOptions, HeldSlot } from './connection-budget.js';
export type { Decision } from './approvals.js';
export type { AuditEntry, AuditLimits, AuditPage, AuditQuery } from './audit.js';
export type { Cacheable } from './cache.js';
export type {
  CallSummary,
  StatCall,
  StatsReport,
  StatsView,
  ToolStats,
  UserStats,
} from './stats.js';
export { FINAL_STATUSES } from './types.js';
export { CallIndex, CALL_INDEX_SIZE } from './call-index.js';
export { Series, LATENCY_BUCKETS_MS } from './series.js';
export type { Gauges, SeriesPoints } from './series.js';
export {
  CallEventWriter,
  CallEvents,
  EVENT_BACKLOG,
  EVENT_BACKLOG_TTL_SECONDS,
  outcomeEvent,
  publishOutcome,
} from './events.js';
export type { EventLimits, OutcomeEvent } from './events.js';
export type {
  CallBrief,
  CallError,
  CallEvent,
  CallJob,
  PolicyVerdict,
  CallOutcome,
  CallRecord,
  CallStatus,
  QueueKind,
} from './types.js';
export {
  CallQueue,
  briefCall,
  endedStub,
  queueOptions,
  queueTelemetry,
  ENDED_STUB_MS,
  FAILED_STUB_MS,
} from './call-queue.js';
export type { Admit, CallBriefFound, CallBriefState, CallState, EndedStub } from './call-queue.js';
export { LuaScript } from './script.js';
export {
  Budgets,
  BUDGET_METRICS,
  BUDGET_WINDOWS,
  budgetConfig,
  budgetRemaining,
  budgetWindow,
  exhaustedBudget,
} from './budgets.js';
export type {
  BudgetCharges,
  BudgetConfig,
  BudgetExhausted,
  BudgetLimits,
  BudgetMetric,
  BudgetUse,
  BudgetWindow,
  BudgetWindowUse,
  CallUsage,
} from './budgets.js';
export { ShardPlacements, callsInFlight, copyClientData, deleteClientData } from './shard-moves.js';
export type { ShardMoveRecord, ShardMoveState, ShardSide } from './shard-moves.js';
