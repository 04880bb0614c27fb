export { loadConfig, parseConfig, ConfigError, sha256 } from './load.js';
export { ConfigSchema } from './schema.js';
export type { Config, ClientConfig } from './schema.js';
