/**
 * Discovers declarative tools: every `<dir>/*\/tool.{yaml,yml,json}`. A manifest that does not
 * parse, fails its schema, names a file it cannot ship, or takes a taken tool name is reported
 * and skipped; loading never fails the process.
 */
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { ToolRegistry, type AnyToolSpec } from '@toolgate/registry';
import { MANIFEST_FILES, readManifest } from './manifest.js';
import { manifestTool } from './tool.js';

export interface ManifestLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface ManifestLoadResult {
  tools: AnyToolSpec[];
  loaded: { name: string; dir: string; image: string }[];
  failed: { dir: string; error: string }[];
}

export interface ManifestLoadOptions {
  /** Tool names already taken (built-ins, plugins). */
  reserved?: Iterable<string>;
  /** Sandbox image keys that exist; when given, a manifest naming another is skipped. */
  images?: readonly string[];
}

export async function loadManifestTools(
  dirs: readonly string[],
  logger: ManifestLogger,
  options: ManifestLoadOptions = {},
): Promise<ManifestLoadResult> {
  const result: ManifestLoadResult = { tools: [], loaded: [], failed: [] };
  const taken = new Set(options.reserved ?? []);
  for (const root of dirs.map((d) => path.resolve(d))) {
    const entries = await readdir(root, { withFileTypes: true }).catch(() => []);
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      if (entry.name.startsWith('.')) continue;
      const dir = path.join(root, entry.name);
      const file = await manifestFile(dir);
      if (!file) continue;
      try {
        const loaded = await readManifest(file);
        const { name, image } = loaded.manifest;
        if (taken.has(name)) {
          throw new Error(`tool "${name}" is already provided by toolgate or a plugin`);
        }
        if (options.images && !options.images.includes(image)) {
          throw new Error(
            `image: no sandbox image "${image}" (configured: ${options.images.join(', ')})`,
          );
        }
        const tool = manifestTool(loaded);
        new ToolRegistry().register(tool); // the registry's own checks: name, schema
        taken.add(name);
        result.tools.push(tool);
        result.loaded.push({ name, dir, image });
        logger.info({ tool: name, dir, image }, 'manifest tool loaded');
      } catch (err) {
        const error = (err as Error).message;
        result.failed.push({ dir, error });
        logger.error({ dir, file, error }, 'manifest tool skipped: it failed to load');
      }
    }
  }
  return result;
}

async function manifestFile(dir: string): Promise<string | undefined> {
  for (const name of MANIFEST_FILES) {
    const file = path.join(dir, name);
    if (
      await stat(file).then(
        (s) => s.isFile(),
        () => false,
      )
    )
      return file;
  }
  return undefined;
}
