/**
 * The one seccomp policy of both drivers: packages/sandbox/seccomp/profile.json, in Docker's
 * profile format. The docker driver hands the JSON to the engine; the bwrap driver loads the
 * same policy compiled to BPF by scripts/sandbox/build-images.sh (bwrap takes raw BPF only).
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { SandboxError } from './errors.js';

/** From src/ and from dist/ alike (both sit next to seccomp/). */
const PROFILE_URL = new URL('../seccomp/profile.json', import.meta.url);
let profileJson: string | undefined;

/** The policy as the Docker engine takes it (`SecurityOpt: ["seccomp=<json>"]`), read once. */
export function seccompProfileJson(): string {
  // Re-serialized: compact, and a syntax error in the file fails here, not in the engine.
  profileJson ??= JSON.stringify(JSON.parse(readFileSync(PROFILE_URL, 'utf8')));
  return profileJson;
}

/** One BPF instruction: struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }. */
const INSN_BYTES = 8;
/** The kernel's limit on one filter program (BPF_MAXINSNS). */
const MAX_INSNS = 4096;

/**
 * Reads the compiled filter for bwrap. A missing or malformed file refuses the driver: running
 * without the filter would silently give bwrap sandboxes more of the kernel than docker ones.
 */
export async function loadSeccompFilter(file: string): Promise<Buffer> {
  const where = path.resolve(file);
  let bpf: Buffer;
  try {
    bpf = await readFile(where);
  } catch (err) {
    throw new SandboxError(
      'driver_unavailable',
      `seccomp filter ${where} is missing: run scripts/sandbox/build-images.sh (or set sandbox.bwrap.seccomp: false to run bwrap sandboxes without one)`,
      { cause: err },
    );
  }
  if (bpf.length === 0 || bpf.length % INSN_BYTES !== 0 || bpf.length / INSN_BYTES > MAX_INSNS) {
    throw new SandboxError(
      'driver_unavailable',
      `seccomp filter ${where} is not a BPF program (${bpf.length} bytes): rebuild it with scripts/sandbox/build-images.sh`,
    );
  }
  return bpf;
}
