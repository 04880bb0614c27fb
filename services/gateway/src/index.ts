export { createGateway } from './gateway.js';
export { startGateway } from './start.js';
export { ApiError } from './errors.js';
export { DIALECTS } from './dialects/index.js';
export type { Gateway, GatewayOptions } from './gateway.js';
export type { ApiErrorCode } from './errors.js';
export type { ShardView } from './shard-moves.js';
export type {
  AnthropicTool,
  AnthropicToolSearchTool,
  Dialect,
  OpenAIChatTool,
  OpenAIResponsesTool,
} from './dialects/index.js';
export type * from './api-types.js';
