/** @toolgate/manifest-tools: a tool.yaml turns any program into a sandboxed tool (docs/spec.md §8). */
export { loadManifestTools } from './load.js';
export {
  ManifestError,
  ManifestSchema,
  MANIFEST_FILES,
  MAX_FILE_BYTES,
  MAX_FILES_BYTES,
  MAX_TIMEOUT_SECONDS,
  parseManifest,
  readManifest,
} from './manifest.js';
export { manifestTool, readResult, TOOL_DIR } from './tool.js';

export type { ManifestLoadOptions, ManifestLoadResult, ManifestLogger } from './load.js';
export type { LoadedManifest, Manifest } from './manifest.js';
