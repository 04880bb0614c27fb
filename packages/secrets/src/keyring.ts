/**
 * The keys secrets are sealed with: AES-256-GCM, a fresh 96-bit nonce per value, the owner and
 * name as additional data (a value copied to another owner or name in Redis does not open).
 * Each sealed value names its key by id, so old values still open while `toolgate secrets
 * rotate` re-seals them with the current key.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SecretError, SecretConfigError } from './errors.js';

const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** Sealed-value format version (the first field). */
const FORMAT = 'v1';

/** Where the keys come from (`secrets` in the config; TOOLGATE_SECRETS_KEY fills `key`). */
export interface SecretKeySources {
  /** The current key itself (32 bytes as base64 or hex), usually from TOOLGATE_SECRETS_KEY. */
  key?: string | undefined;
  /** A file holding the current key (same encodings); used when `key` is not set. */
  keyFile?: string | undefined;
  /** Files of earlier keys: values sealed with them still open, `rotate` re-seals them. */
  previousKeyFiles?: readonly string[] | undefined;
}

/** 32 bytes from base64 (44 characters, padded or not, url-safe or not) or hex (64). */
export function parseKey(text: string, field: string): Buffer {
  const t = text.trim();
  let bytes: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(t)) bytes = Buffer.from(t, 'hex');
  else if (/^[A-Za-z0-9+/_-]{43}=?$/.test(t)) bytes = Buffer.from(t, 'base64');
  if (!bytes || bytes.length !== KEY_BYTES) {
    throw new SecretConfigError(
      field,
      `must be ${KEY_BYTES} random bytes written as base64 (44 characters) or hex (64 characters); ` +
        'make one with `openssl rand -base64 32`',
    );
  }
  return bytes;
}

function readKeyFile(file: string, field: string): Buffer {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new SecretConfigError(field, `cannot read ${file}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return parseKey(text, field);
}

/** A key's id: the start of its SHA-256, so a sealed value says which key opens it. */
function keyId(key: Buffer): string {
  return createHash('sha256').update(key).digest('base64url').slice(0, 11);
}

export class KeyRing {
  readonly currentId: string;
  private readonly keys: Map<string, Buffer>;

  private constructor(current: Buffer, previous: Buffer[]) {
    this.currentId = keyId(current);
    this.keys = new Map([current, ...previous].map((k) => [keyId(k), k]));
  }

  /** From the config: undefined when no key is configured (the store is then off). */
  static load(sources: SecretKeySources): KeyRing | undefined {
    const previous = (sources.previousKeyFiles ?? []).map((file, i) =>
      readKeyFile(file, `/secrets/previousKeyFiles/${i}`),
    );
    let current: Buffer | undefined;
    if (sources.key !== undefined && sources.key !== '')
      current = parseKey(sources.key, 'TOOLGATE_SECRETS_KEY');
    else if (sources.keyFile) current = readKeyFile(sources.keyFile, '/secrets/keyFile');
    if (!current) {
      if (previous.length > 0)
        throw new SecretConfigError(
          '/secrets/keyFile',
          'previousKeyFiles are set but no current key (secrets.keyFile or TOOLGATE_SECRETS_KEY)',
        );
      return undefined;
    }
    return new KeyRing(current, previous);
  }

  /** For tests and tools: a ring of given raw keys, the first current. */
  static of(current: Buffer, ...previous: Buffer[]): KeyRing {
    return new KeyRing(current, previous);
  }

  /** `v1.<key id>.<nonce>.<ciphertext+tag>` (base64url), bound to `context`. */
  seal(plaintext: string, context: string): string {
    const key = this.keys.get(this.currentId)!;
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, nonce);
    cipher.setAAD(Buffer.from(context, 'utf8'));
    const body = Buffer.concat([
      cipher.update(plaintext, 'utf8'),
      cipher.final(),
      cipher.getAuthTag(),
    ]);
    return [FORMAT, this.currentId, nonce.toString('base64url'), body.toString('base64url')].join(
      '.',
    );
  }

  /** The key id a sealed value names (undefined: not a sealed value). */
  keyIdOf(sealed: string): string | undefined {
    const parts = sealed.split('.');
    return parts.length === 4 && parts[0] === FORMAT ? parts[1] : undefined;
  }

  open(sealed: string, context: string): string {
    const [format, id, nonce, body] = sealed.split('.');
    const key = id === undefined ? undefined : this.keys.get(id);
    if (format !== FORMAT || !key || nonce === undefined || body === undefined) {
      throw new SecretError(
        'secret_unreadable',
        id !== undefined && format === FORMAT
          ? `the secret was sealed with key ${id}, which is not configured (secrets.previousKeyFiles)`
          : 'the stored secret is not in a known format',
      );
    }
    const raw = Buffer.from(body, 'base64url');
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(nonce, 'base64url'));
      decipher.setAAD(Buffer.from(context, 'utf8'));
      decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
      return Buffer.concat([
        decipher.update(raw.subarray(0, raw.length - TAG_BYTES)),
        decipher.final(),
      ]).toString('utf8');
    } catch (err) {
      throw new SecretError(
        'secret_unreadable',
        'the stored secret does not open with its key: it was altered or moved',
        { cause: err },
      );
    }
  }
}
