/** The tools that run in a throwaway sandbox (docs/spec.md §4, §5): code runners and workspace file tools. */
import type { AnyToolSpec } from '@toolgate/registry';
import { fileDelete, fileList, fileRead, fileWrite } from './file-tools.js';
import { runPython, runShell } from './run-code.js';
import './services.js';

export const sandboxedTools: AnyToolSpec[] = [
  runPython,
  runShell,
  fileRead,
  fileWrite,
  fileList,
  fileDelete,
];

export { runPython, runShell } from './run-code.js';
export { runInWorkspace } from './run-in-workspace.js';
export { ATTACHMENT_LIMITS, attachmentsOf, withoutAttachmentData } from './attachments.js';
export type { Attachment, OmittedAttachment } from './attachments.js';
export {
  fileRead,
  fileWrite,
  fileList,
  fileDelete,
  MAX_READ_BYTES,
  MAX_WRITE_CHARS,
  MAX_LIST_ENTRIES,
} from './file-tools.js';
export { sandboxServices, toToolError } from './services.js';
export { FILE_OPS } from './file-ops.js';

export type { RunToolResult } from './run-in-workspace.js';
export type {
  FileReadResult,
  FileWriteResult,
  FileListResult,
  FileDeleteResult,
} from './file-tools.js';
