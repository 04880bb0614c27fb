/** The tool.yaml format: one schema, defaults and readable errors naming the field. */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { Value, ValueErrorType } from '@sinclair/typebox/value';
import { TOOL_NAME } from '@toolgate/registry';
import { parse as parseYaml } from 'yaml';

export const MANIFEST_FILES = ['tool.yaml', 'tool.yml', 'tool.json'] as const;

/** Files ride into the sandbox base64-encoded in argv: under Linux's 128 KiB per argument. */
export const MAX_FILE_BYTES = 96 * 1024;
export const MAX_FILES_BYTES = 512 * 1024;
export const MAX_TIMEOUT_SECONDS = 300;

const Risk = Type.Union([
  Type.Literal('safe'),
  Type.Literal('sensitive'),
  Type.Literal('destructive'),
]);

export const ManifestSchema = Type.Object(
  {
    name: Type.String({ pattern: TOOL_NAME.source, description: 'Tool name, unique in toolgate' }),
    description: Type.String({ minLength: 1, description: 'What the model reads' }),
    category: Type.String({ minLength: 1, default: 'custom' }),
    /** JSON Schema of the arguments (an object schema); sent to the program as JSON on stdin. */
    parameters: Type.Record(Type.String(), Type.Unknown()),
    /** Sandbox image key from the config (`python`, `shell`, …). */
    image: Type.String({ pattern: '^[a-z0-9][a-z0-9_-]*$' }),
    /** argv, or a string run with `sh -c`. Runs in /tmp/tool, where `files` are copied. */
    command: Type.Union([
      Type.Array(Type.String(), { minItems: 1 }),
      Type.String({ minLength: 1 }),
    ]),
    /** Files of the tool's folder copied into /tmp/tool before the command runs. */
    files: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    timeoutSeconds: Type.Integer({ minimum: 1, maximum: MAX_TIMEOUT_SECONDS, default: 30 }),
    /** Network access for the program; the sandbox config must also allow it. */
    network: Type.Boolean({ default: false }),
    /** Mount the calling client's workspace at /workspace (read-write); cached per client. */
    workspace: Type.Boolean({ default: false }),
    /** json: stdout must be JSON; text: stdout as a string; auto: JSON when it parses. */
    output: Type.Union([Type.Literal('auto'), Type.Literal('json'), Type.Literal('text')], {
      default: 'auto',
    }),
    /**
     * JSON Schema of what the program prints (with `output: json`): MCP clients get it as the
     * tool's outputSchema and the result as structuredContent (a non-object one wrapped as
     * `{"result": …}`).
     */
    result: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
    risk: Type.Optional(Risk),
    requiresApproval: Type.Optional(Type.Boolean()),
    cacheTtlSeconds: Type.Integer({ minimum: 0, default: 0 }),
    idempotent: Type.Boolean({ default: false }),
    memoryMb: Type.Optional(Type.Integer({ minimum: 16 })),
  },
  { additionalProperties: false },
);

export type Manifest = Static<typeof ManifestSchema>;

export class ManifestError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ManifestError';
  }
}

/** A validated manifest plus the contents of its files. */
export interface LoadedManifest {
  manifest: Manifest;
  dir: string;
  files: { name: string; content: Buffer }[];
}

export async function readManifest(file: string): Promise<LoadedManifest> {
  const dir = path.dirname(file);
  let raw: unknown;
  try {
    const text = await readFile(file, 'utf8');
    raw = file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new ManifestError(`${path.basename(file)} is not valid: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const manifest = parseManifest(raw);
  const files = [];
  let total = 0;
  for (const name of manifest.files) {
    const full = path.resolve(dir, name);
    if (path.relative(dir, full).startsWith('..') || path.isAbsolute(name)) {
      throw new ManifestError(`files: "${name}" is outside the tool's folder`);
    }
    const info = await stat(full).catch(() => undefined);
    if (!info?.isFile()) throw new ManifestError(`files: "${name}" is not a file in ${dir}`);
    if (info.size > MAX_FILE_BYTES) {
      throw new ManifestError(`files: "${name}" is over ${MAX_FILE_BYTES / 1024} KiB`);
    }
    total += info.size;
    if (total > MAX_FILES_BYTES) {
      throw new ManifestError(`files: more than ${MAX_FILES_BYTES / 1024} KiB in all`);
    }
    files.push({ name: path.relative(dir, full), content: await readFile(full) });
  }
  return { manifest, dir, files };
}

/** Fills defaults and validates; the error names the first offending field. */
export function parseManifest(raw: unknown): Manifest {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ManifestError('the manifest must be a mapping of fields');
  }
  const value = Value.Default(ManifestSchema, structuredClone(raw)) as Record<string, unknown>;
  const first = Value.Errors(ManifestSchema, value).First();
  if (first) {
    const field = first.path.replace(/^\//, '').replace(/\//g, '.') || '(top level)';
    if (first.type === ValueErrorType.ObjectAdditionalProperties) {
      throw new ManifestError(`${field}: unknown field`);
    }
    throw new ManifestError(`${field}: ${first.message}`);
  }
  const manifest = value as Manifest;
  if (manifest.parameters.type !== 'object') {
    throw new ManifestError('parameters: must be a JSON Schema with type: object');
  }
  if (manifest.result && manifest.result.type !== 'object') {
    throw new ManifestError('result: must be a JSON Schema with type: object');
  }
  // With auto or text output a run may answer a string: no object schema can promise its shape.
  if (manifest.result && manifest.output !== 'json') {
    throw new ManifestError('result: needs output: json');
  }
  return manifest;
}
