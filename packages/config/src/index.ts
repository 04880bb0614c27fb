export { loadConfig, parseConfig, checkConfig, ConfigError, sha256 } from './load.js';
export { ConfigSchema, CLIENT_LIMIT_DEFAULTS, OAUTH_ALGORITHMS } from './schema.js';
export type { Config, ClientConfig, RedisConfig, AuthConfig, OAuthConfig } from './schema.js';
export type { ConfigProblem } from './load.js';
export {
  UpstreamSchema,
  NPM_SERVERS_DIR,
  isStdioUpstream,
  stdioArgv,
  UPSTREAM_SEPARATOR,
  upstreamToolName,
} from './upstreams.js';
export type { UpstreamConfig } from './upstreams.js';
export { ShardMap, HOME_SHARD, shardProblems } from './shards.js';
export type { Shard, ShardRedis } from './shards.js';
