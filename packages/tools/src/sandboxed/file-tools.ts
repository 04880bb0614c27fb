/**
 * file_read, file_write, file_list, file_delete: confined to the calling client's workspace.
 * Each path is checked twice: on the host (Workspaces.resolve: absolute paths, `..` escapes and
 * symlinks leading out are refused with `invalid_path` before any sandbox starts), then inside
 * the sandbox by FILE_OPS, which runs as the sandbox user with only the workspace mounted.
 */
import path from 'node:path';
import { Type, ToolError, defineTool, spaceOf, type ToolContext } from '@toolgate/registry';
import { normalizeRelative } from '@toolgate/sandbox';
import { FILE_OPS } from './file-ops.js';
import { sandboxServices, toToolError } from './services.js';

/** Largest slice file_read returns; bigger files come back truncated. */
export const MAX_READ_BYTES = 256 * 1024;
export const MAX_WRITE_CHARS = 1_000_000;
export const MAX_LIST_ENTRIES = 1000;
const FILE_TIMEOUT_MS = 20_000;
/** JSON escaping can grow content up to 6×; the answer must not be cut. */
const ANSWER_BYTES = MAX_READ_BYTES * 6 + 64 * 1024;

type Op =
  | { op: 'read'; path: string; maxBytes: number }
  | { op: 'write'; path: string; content: string; append: boolean }
  | { op: 'list'; path: string; maxEntries: number }
  | { op: 'delete'; path: string };

async function fileOp<T>(ctx: ToolContext, request: Op): Promise<T> {
  const { sandbox, workspaces } = sandboxServices(ctx);
  let stdout: string;
  try {
    // Host-side confinement first: a refused path never costs a sandbox.
    if (request.op === 'delete') {
      // The last component is not followed (deleting a link removes the link); its parent must stay inside.
      const rel = normalizeRelative(request.path);
      if (rel === '') throw new ToolError('invalid_path', 'cannot delete the workspace itself');
      await workspaces.resolve(spaceOf(ctx), path.posix.dirname(rel));
      request = { ...request, path: rel };
    } else {
      request = {
        ...request,
        path: (await workspaces.resolve(spaceOf(ctx), request.path)).relative,
      } as Op;
    }
    const workspace = await workspaces.ensure(spaceOf(ctx));
    const result = await sandbox.run({
      image: 'python',
      // -I (isolated): the working directory is the client's workspace, and `python3 -c` would
      // put it first on sys.path — a json.py there would run in place of the stdlib module and
      // answer for FILE_OPS. Isolated mode leaves it (and PYTHON* variables) out.
      argv: ['python3', '-I', '-c', FILE_OPS],
      stdin: JSON.stringify(request),
      workspace,
      timeoutMs: FILE_TIMEOUT_MS,
      limits: { outputBytes: ANSWER_BYTES },
      signal: ctx.signal,
      callId: ctx.callId,
      clientId: ctx.clientId,
    });
    if (result.timedOut)
      throw new ToolError('timeout', 'the file operation did not finish in time');
    if (result.exitCode !== 0) {
      const detail = result.oomKilled
        ? 'out of memory'
        : (result.stderr.trim().split('\n').slice(-1)[0] ?? '');
      throw new ToolError(
        'sandbox_error',
        `the file operation failed (exit ${result.exitCode}): ${detail}`,
      );
    }
    stdout = result.stdout;
  } catch (err) {
    throw toToolError(err);
  }
  let answer: { ok: boolean; code?: string; message?: string } & Record<string, unknown>;
  try {
    answer = JSON.parse(stdout) as typeof answer;
  } catch {
    throw new ToolError('sandbox_error', 'the file operation returned no readable answer');
  }
  if (!answer.ok)
    throw new ToolError(answer.code ?? 'io_error', answer.message ?? 'file operation failed');
  delete (answer as Record<string, unknown>).ok;
  return answer as T;
}

const pathParam = (description: string) => Type.String({ maxLength: 4096, description });

export interface FileReadResult {
  path: string;
  size: number;
  content: string;
  /** 'base64' for binary files. */
  encoding: 'utf-8' | 'base64';
  truncated: boolean;
}

const resultPath = Type.String({ description: 'The path, relative to the workspace' });
const size = Type.Integer({ minimum: 0, description: 'Size in bytes' });

export const FileReadResultSchema = Type.Object(
  {
    path: resultPath,
    size,
    content: Type.String({ description: 'Text, or base64 when encoding is "base64"' }),
    encoding: Type.Union([Type.Literal('utf-8'), Type.Literal('base64')]),
    truncated: Type.Boolean({ description: `Only the first ${MAX_READ_BYTES} bytes came back` }),
  },
  { additionalProperties: false },
);

export const fileRead = defineTool({
  name: 'file_read',
  description: `Read a file from your workspace (path relative to /workspace). Text comes back as UTF-8, binary as base64; at most ${MAX_READ_BYTES} bytes.`,
  category: 'files',
  parameters: Type.Object({
    path: pathParam('File path relative to the workspace, e.g. "data/report.csv"'),
  }),
  result: FileReadResultSchema,
  sandbox: { image: 'python' },
  risk: 'safe',
  timeoutMs: FILE_TIMEOUT_MS + 10_000,
  handler: (args, ctx) =>
    fileOp<FileReadResult>(ctx, { op: 'read', path: args.path, maxBytes: MAX_READ_BYTES }),
});

export interface FileWriteResult {
  path: string;
  bytesWritten: number;
  size: number;
}

export const FileWriteResultSchema = Type.Object(
  {
    path: resultPath,
    bytesWritten: Type.Integer({ minimum: 0, description: 'Bytes of content written' }),
    size: Type.Integer({ minimum: 0, description: 'Size of the file after the write' }),
  },
  { additionalProperties: false },
);

export const fileWrite = defineTool({
  name: 'file_write',
  description:
    'Write a UTF-8 text file in your workspace (path relative to /workspace), creating parent directories; append adds to the end instead of replacing.',
  category: 'files',
  parameters: Type.Object({
    path: pathParam('File path relative to the workspace'),
    content: Type.String({ maxLength: MAX_WRITE_CHARS, description: 'Text to write' }),
    append: Type.Optional(
      Type.Boolean({ description: 'Append instead of replacing (default false)' }),
    ),
  }),
  result: FileWriteResultSchema,
  sandbox: { image: 'python' },
  risk: 'sensitive',
  timeoutMs: FILE_TIMEOUT_MS + 10_000,
  handler: (args, ctx) =>
    fileOp<FileWriteResult>(ctx, {
      op: 'write',
      path: args.path,
      content: args.content,
      append: args.append ?? false,
    }),
});

export interface FileListResult {
  path: string;
  entries: { name: string; type: 'file' | 'directory' | 'symlink' | 'other'; size: number }[];
  truncated: boolean;
}

export const FileListResultSchema = Type.Object(
  {
    path: resultPath,
    entries: Type.Array(
      Type.Object(
        {
          name: Type.String(),
          type: Type.Union([
            Type.Literal('file'),
            Type.Literal('directory'),
            Type.Literal('symlink'),
            Type.Literal('other'),
          ]),
          size,
        },
        { additionalProperties: false },
      ),
      { maxItems: MAX_LIST_ENTRIES, description: 'Sorted by name' },
    ),
    truncated: Type.Boolean({
      description: `Only the first ${MAX_LIST_ENTRIES} entries came back`,
    }),
  },
  { additionalProperties: false },
);

export const fileList = defineTool({
  name: 'file_list',
  description:
    'List a directory of your workspace (default: the workspace root): name, type and size of each entry.',
  category: 'files',
  parameters: Type.Object({
    path: Type.Optional(pathParam('Directory relative to the workspace (default ".")')),
  }),
  result: FileListResultSchema,
  sandbox: { image: 'python' },
  risk: 'safe',
  timeoutMs: FILE_TIMEOUT_MS + 10_000,
  handler: (args, ctx) =>
    fileOp<FileListResult>(ctx, {
      op: 'list',
      path: args.path ?? '',
      maxEntries: MAX_LIST_ENTRIES,
    }),
});

export interface FileDeleteResult {
  path: string;
  deleted: 'file' | 'directory' | 'symlink';
}

export const FileDeleteResultSchema = Type.Object(
  {
    path: resultPath,
    deleted: Type.Union([Type.Literal('file'), Type.Literal('directory'), Type.Literal('symlink')]),
  },
  { additionalProperties: false },
);

export const fileDelete = defineTool({
  name: 'file_delete',
  description:
    'Delete a file, a symbolic link, or a directory with everything in it, from your workspace. Needs approval.',
  category: 'files',
  parameters: Type.Object({ path: pathParam('Path relative to the workspace') }),
  result: FileDeleteResultSchema,
  sandbox: { image: 'python' },
  risk: 'destructive',
  timeoutMs: FILE_TIMEOUT_MS + 10_000,
  handler: (args, ctx) => fileOp<FileDeleteResult>(ctx, { op: 'delete', path: args.path }),
});
