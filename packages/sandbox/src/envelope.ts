/**
 * The call envelope a pre-started container's entrypoint (deploy/sandbox/common/toolgate-entry)
 * reads from stdin before exec'ing the program: "TOOLGATE1 <argc>\n", then each argument
 * NUL-terminated, then the program's own stdin.
 */
import { SandboxError } from './errors.js';

export function encodeEnvelope(argv: readonly string[], stdin?: string | Uint8Array): Buffer {
  if (argv.length === 0) throw new SandboxError('invalid_request', 'argv must not be empty');
  const parts: Buffer[] = [Buffer.from(`TOOLGATE1 ${argv.length}\n`)];
  for (const arg of argv) {
    if (arg.includes('\0')) throw new SandboxError('invalid_request', 'arguments cannot contain NUL bytes');
    parts.push(Buffer.from(arg, 'utf8'), Buffer.from([0]));
  }
  if (stdin !== undefined && stdin.length > 0) parts.push(typeof stdin === 'string' ? Buffer.from(stdin, 'utf8') : Buffer.from(stdin));
  return Buffer.concat(parts);
}
