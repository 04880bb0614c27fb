/** Errors of the secret store, each with a stable code the gateway and the CLI answer with. */

export type SecretErrorCode =
  /** The name does not match SECRET_NAME. */
  | 'invalid_secret_name'
  /** The value is empty, over MAX_SECRET_BYTES, or not text. */
  | 'invalid_secret_value'
  /** The user (sub) is empty or over MAX_USER_CHARS. */
  | 'invalid_user'
  /** The owner holds MAX_SECRETS_PER_OWNER secrets already. */
  | 'too_many_secrets'
  /** No secret of that name. */
  | 'secret_not_found'
  /** A stored value cannot be opened: its key id is not configured, or it was altered. */
  | 'secret_unreadable'
  /** No secrets key is configured (secrets.keyFile, TOOLGATE_SECRETS_KEY). */
  | 'secrets_disabled';

export class SecretError extends Error {
  readonly code: SecretErrorCode;
  readonly details: Record<string, unknown> | undefined;

  constructor(
    code: SecretErrorCode,
    message: string,
    options: { details?: Record<string, unknown>; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = 'SecretError';
    this.code = code;
    this.details = options.details;
  }
}

/**
 * A secrets key that is unreadable or not 32 bytes, or a credential rule that cannot be used:
 * a configuration error, raised at start so a process never runs with what it cannot use.
 */
export class SecretConfigError extends Error {
  /** What is wrong, without the field (the config checker lists field and reason apart). */
  readonly reason: string;

  constructor(
    readonly field: string,
    reason: string,
    options: { cause?: unknown } = {},
  ) {
    super(`invalid configuration: ${field}: ${reason}`, options);
    this.name = 'SecretConfigError';
    this.reason = reason;
  }
}
