/**
 * Plugin discovery (docs/spec.md §8): every `<dir>/*\/plugin.{mjs,js}` is imported at start. A plugin
 * that cannot load — syntax error, throws at import, bad shape, invalid tool schema, a tool
 * name already taken — is reported and skipped whole; loading never fails the process.
 */
import { execFile } from 'node:child_process';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ToolError, ToolRegistry, Type, type AnyToolSpec } from '@toolgate/registry';
import type { PluginContext, PluginDefinition, PluginLogger } from './plugin.js';

export const PLUGIN_FILES = ['plugin.mjs', 'plugin.js'] as const;

export interface LoadedPlugin {
  name: string;
  dir: string;
  /** Names of the tools it added. */
  tools: string[];
}

export interface FailedPlugin {
  dir: string;
  error: string;
}

export interface LoadResult {
  tools: AnyToolSpec[];
  loaded: LoadedPlugin[];
  failed: FailedPlugin[];
}

export interface LoadOptions {
  /** Tool names already taken (the built-ins): a plugin reusing one is skipped. */
  reserved?: Iterable<string>;
  /** Passed to plugin factories as ctx.env (default process.env). */
  env?: Readonly<Record<string, string | undefined>>;
  /** How long a plugin's import plus factory may take (default 10 s). */
  timeoutMs?: number;
}

class PluginLoadError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PluginLoadError';
  }
}

/** Relative dirs are resolved against the working directory; a missing dir is skipped. */
export async function loadPlugins(
  dirs: readonly string[],
  logger: PluginLogger,
  options: LoadOptions = {},
): Promise<LoadResult> {
  const result: LoadResult = { tools: [], loaded: [], failed: [] };
  const taken = new Set(options.reserved ?? []);
  for (const dir of dirs) {
    for (const pluginDir of await pluginDirs(path.resolve(dir), logger)) {
      const file = await pluginFile(pluginDir);
      if (!file) continue;
      try {
        const plugin = await withTimeout(
          importPlugin(file, pluginDir, logger, options.env ?? process.env),
          options.timeoutMs ?? 10_000,
          `did not finish loading within ${options.timeoutMs ?? 10_000} ms`,
        );
        checkTools(plugin, taken);
        for (const tool of plugin.tools) taken.add(tool.name);
        result.tools.push(...plugin.tools);
        const names = plugin.tools.map((t) => t.name);
        result.loaded.push({ name: plugin.name, dir: pluginDir, tools: names });
        logger.info({ plugin: plugin.name, dir: pluginDir, tools: names }, 'plugin loaded');
      } catch (err) {
        const error = describe(err);
        result.failed.push({ dir: pluginDir, error });
        logger.error({ dir: pluginDir, file, error }, 'plugin skipped: it failed to load');
      }
    }
  }
  return result;
}

async function pluginDirs(root: string, logger: PluginLogger): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(root, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      logger.debug({ dir: root }, 'no plugins directory');
      return [];
    }
    logger.warn({ dir: root, err: (err as Error).message }, 'cannot read the plugins directory');
    return [];
  }
  // Directories and links to directories, in a stable order so duplicates resolve the same way.
  const dirs: string[] = [];
  for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    if (e.name.startsWith('.') || e.name === 'node_modules') continue;
    const full = path.join(root, e.name);
    if (e.isDirectory() || (e.isSymbolicLink() && (await isDir(full)))) dirs.push(full);
  }
  return dirs;
}

async function isDir(p: string): Promise<boolean> {
  return stat(p).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

async function pluginFile(dir: string): Promise<string | undefined> {
  for (const name of PLUGIN_FILES) {
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

async function importPlugin(
  file: string,
  dir: string,
  logger: PluginLogger,
  env: Readonly<Record<string, string | undefined>>,
): Promise<PluginDefinition> {
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (err) {
    const where = err instanceof SyntaxError ? await syntaxErrorLocation(file) : undefined;
    throw new PluginLoadError(
      `cannot import ${path.basename(file)}: ${describe(err)}${where ? ` (at ${where})` : ''}`,
      { cause: err },
    );
  }
  let exported = mod.default;
  if (exported === undefined) {
    throw new PluginLoadError(
      'no default export: export default { name, tools } or a function returning it',
    );
  }
  if (typeof exported === 'function') {
    const ctx: PluginContext = {
      dir,
      env,
      logger:
        (logger as { child?: (b: object) => PluginLogger }).child?.({
          plugin: path.basename(dir),
        }) ?? logger,
      ToolError,
      Type,
    };
    try {
      exported = await (exported as (c: PluginContext) => unknown)(ctx);
    } catch (err) {
      throw new PluginLoadError(`its setup function threw: ${describe(err)}`, { cause: err });
    }
  }
  return checkShape(exported, path.basename(dir));
}

function checkShape(value: unknown, fallbackName: string): PluginDefinition {
  if (typeof value !== 'object' || value === null) {
    throw new PluginLoadError(
      'the default export must be { name, tools } or a function returning it',
    );
  }
  const { name, tools } = value as Record<string, unknown>;
  if (name !== undefined && (typeof name !== 'string' || name.trim() === '')) {
    throw new PluginLoadError('"name" must be a non-empty string');
  }
  if (!Array.isArray(tools) || tools.length === 0) {
    throw new PluginLoadError('"tools" must be a non-empty array of tool definitions');
  }
  tools.forEach((tool: unknown, i) => {
    const t = (typeof tool === 'object' && tool !== null ? tool : {}) as Record<string, unknown>;
    const label = typeof t.name === 'string' ? `tool "${t.name}"` : `tools[${i}]`;
    for (const field of ['name', 'description', 'category'] as const) {
      if (typeof t[field] !== 'string' || (t[field] as string).trim() === '') {
        throw new PluginLoadError(`${label}: "${field}" must be a non-empty string`);
      }
    }
    if (typeof t.handler !== 'function') {
      throw new PluginLoadError(`${label}: "handler" must be a function`);
    }
    if (typeof t.parameters !== 'object' || t.parameters === null) {
      throw new PluginLoadError(`${label}: "parameters" must be a JSON Schema object`);
    }
  });
  return { name: (name as string | undefined) ?? fallbackName, tools: tools as AnyToolSpec[] };
}

/** Registers the tools in a scratch registry: names, schemas and duplicates as the real one sees them. */
function checkTools(plugin: PluginDefinition, taken: ReadonlySet<string>): void {
  const scratch = new ToolRegistry();
  for (const tool of plugin.tools) {
    if (taken.has(tool.name)) {
      throw new PluginLoadError(
        `tool "${tool.name}" is already provided by toolgate or another plugin`,
      );
    }
    try {
      scratch.register(tool);
    } catch (err) {
      throw new PluginLoadError((err as Error).message, { cause: err });
    }
  }
}

function describe(err: unknown): string {
  if (err instanceof PluginLoadError) return err.message;
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

/**
 * import() reports a SyntaxError without file or line; `node --check` prints both. Only run
 * when a plugin already failed, so its cost never touches a healthy start.
 */
function syntaxErrorLocation(file: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--check', file], { timeout: 5000 }, (_err, _out, stderr) => {
      const first = stderr.split('\n').find((l) => l.startsWith(`${file}:`));
      const line = first?.slice(file.length + 1);
      resolve(line && /^\d+$/.test(line) ? `${path.basename(file)}:${line}` : undefined);
    });
  });
}

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new PluginLoadError(message)), ms);
    timer.unref();
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
