export type SandboxErrorCode =
  /** No usable driver: Docker not answering and bwrap missing, or images not built. */
  | 'driver_unavailable'
  /** The request names an image key the config does not define. */
  | 'unknown_image'
  /** The request is malformed (empty argv, network refused, bad workspace). */
  | 'invalid_request'
  /** The sandbox could not be created or started. */
  | 'start_failed'
  /** The caller's AbortSignal fired; the call was killed. */
  | 'aborted'
  /** The client's workspace could not be prepared (quota required but not possible here). */
  | 'workspace_unavailable'
  /** The driver is closed. */
  | 'closed';

/** A failure of the sandbox itself, as opposed to the program inside it failing. */
export class SandboxError extends Error {
  readonly code: SandboxErrorCode;

  constructor(code: SandboxErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, { cause: options?.cause });
    this.name = 'SandboxError';
    this.code = code;
  }
}
