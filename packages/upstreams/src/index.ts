export { UpstreamCatalog, CATALOG_LIMITS } from './catalog.js';
export { UpstreamCalls, upstreamCalls } from './services.js';
export { UpstreamConnection, MAX_RESPONSE_BYTES, CALL_META_KEY } from './connection.js';
export { upstreamToolSpec, resultOf, needsApproval } from './tool.js';
export { Pins, definitionHash, pinStatus } from './pins.js';
export { scanDefinition, SCAN_MAX_CHARS } from './scan.js';
export { StdioServer, StdioServers, STDIO_BACKOFF } from './stdio-server.js';
export { SandboxStdioTransport, STDIO_MAX_MESSAGE_BYTES } from './stdio-transport.js';
export { sharePaths } from './stdio-share.js';

export type {
  UpstreamStatus,
  UpstreamState,
  CatalogLogger,
  HeldTool,
  UpstreamReport,
  UpstreamToolReport,
  UnenforcedPatternReport,
  SupervisorReport,
  SupervisorSummary,
} from './catalog.js';
export type { UpstreamToolDefinition } from './tool.js';
export type { CallHooks } from './connection.js';
export type { PinEntry, PinEvent, PinStatus, ApproveResult } from './pins.js';
export type { ScanFlag, ScanFlagCode } from './scan.js';
export type { StdioState, StdioServerOptions, StdioLogger, StdioSnapshot } from './stdio-server.js';
export type { SandboxStdioTransportOptions } from './stdio-transport.js';
export type { StdioShare } from './stdio-share.js';
