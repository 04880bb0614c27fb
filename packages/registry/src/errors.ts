/**
 * An error a tool handler throws to fail its call with a stable code the model can read.
 * Any other exception becomes code `tool_error`.
 */
export class ToolError extends Error {
  readonly code: string;
  readonly details: unknown;

  constructor(code: string, message: string, options?: { details?: unknown; cause?: unknown }) {
    super(message, { cause: options?.cause });
    this.name = 'ToolError';
    this.code = code;
    this.details = options?.details;
  }
}
