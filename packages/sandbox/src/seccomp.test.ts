import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox } from './index.js';
import { seccompProfileJson } from './seccomp.js';
import { SECCOMP_FILTER, testSandboxConfig, whyDriverUnavailable } from './testing.js';

const skip = (await whyDriverUnavailable('bwrap')) !== undefined;
const filterBuilt = await access(SECCOMP_FILTER).then(
  () => true,
  () => false,
);

/**
 * The filter's architecture rule, read from the compiled program itself rather than from what one
 * kernel does with a foreign syscall (some kernels fault `int 0x80` before any filter runs, so a
 * live probe cannot tell a filter that allows i386 from one that refuses it). A classic-BPF
 * evaluator over `struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }`.
 */
const AUDIT_ARCH_X86_64 = 0xc000003e;
const AUDIT_ARCH_I386 = 0x40000003;
const AUDIT_ARCH_AARCH64 = 0xc00000b7;
const AUDIT_ARCH_ARM = 0x40000028;
const SECCOMP_RET_ACTION_FULL = 0xffff0000;
const SECCOMP_RET_ALLOW = 0x7fff0000;
const SECCOMP_RET_ERRNO = 0x00050000;
/** KILL_THREAD (0) and KILL_PROCESS (0x80000000): the process never sees the call return. */
const killed = (ret: number) => ret === 0 || ret === 0x80000000;

function runBpf(program: Buffer, data: { nr: number; arch: number }): number {
  const packet = Buffer.alloc(64);
  packet.writeInt32LE(data.nr, 0);
  packet.writeUInt32LE(data.arch, 4);
  let a = 0;
  let x = 0;
  const mem = new Uint32Array(16);
  for (let pc = 0, steps = 0; pc * 8 < program.length && steps < 10_000; pc++, steps++) {
    const code = program.readUInt16LE(pc * 8);
    const jt = program.readUInt8(pc * 8 + 2);
    const jf = program.readUInt8(pc * 8 + 3);
    const k = program.readUInt32LE(pc * 8 + 4);
    const cls = code & 0x07;
    if (cls === 0x00) {
      // BPF_LD: only word loads, absolute (seccomp_data fields) or immediate.
      if ((code & 0xe0) === 0x20) a = packet.readUInt32LE(k);
      else if ((code & 0xe0) === 0x00) a = k;
      else if ((code & 0xe0) === 0x60) a = mem[k] ?? 0;
      else throw new Error(`unsupported load ${code.toString(16)}`);
    } else if (cls === 0x01) x = (code & 0xe0) === 0x60 ? (mem[k] ?? 0) : k;
    else if (cls === 0x02) mem[k] = a;
    else if (cls === 0x03) mem[k] = x;
    else if (cls === 0x04) {
      const v = code & 0x08 ? x : k;
      const op = code & 0xf0;
      if (op === 0x00) a = (a + v) >>> 0;
      else if (op === 0x10) a = (a - v) >>> 0;
      else if (op === 0x50) a = (a & v) >>> 0;
      else if (op === 0x40) a = (a | v) >>> 0;
      else throw new Error(`unsupported alu ${code.toString(16)}`);
    } else if (cls === 0x05) {
      const v = code & 0x08 ? x : k;
      const op = code & 0xf0;
      if (op === 0x00) pc += k;
      else if (op === 0x10) pc += a === v ? jt : jf;
      else if (op === 0x20) pc += a > v ? jt : jf;
      else if (op === 0x30) pc += a >= v ? jt : jf;
      else if (op === 0x40) pc += (a & v) !== 0 ? jt : jf;
      else throw new Error(`unsupported jump ${code.toString(16)}`);
    } else if (cls === 0x06) return (code & 0x18) === 0x10 ? a : k;
    else if (cls === 0x07) {
      if (code & 0x80) a = x;
      else x = a;
    }
  }
  throw new Error('the program ran off its end');
}

describe('the seccomp policy', () => {
  it('is one default-deny profile that closes what Docker closes, and ptrace', () => {
    const profile = JSON.parse(seccompProfileJson()) as {
      defaultAction: string;
      defaultErrnoRet: number;
      syscalls: { names: string[]; action: string; args?: unknown[] }[];
    };
    expect(profile).toMatchObject({ defaultAction: 'SCMP_ACT_ERRNO', defaultErrnoRet: 1 });
    const unconditional = new Set(
      profile.syscalls
        .filter((s) => s.action === 'SCMP_ACT_ALLOW' && !s.args?.length)
        .flatMap((s) => s.names),
    );
    expect(unconditional.has('read')).toBe(true);
    for (const closed of [
      'unshare',
      'clone',
      'clone3',
      'setns',
      'mount',
      'umount2',
      'pivot_root',
      'keyctl',
      'add_key',
      'request_key',
      'bpf',
      'userfaultfd',
      'perf_event_open',
      'ptrace',
      'process_vm_readv',
      'kexec_load',
      'init_module',
      'finit_module',
      'delete_module',
      'open_by_handle_at',
      'name_to_handle_at',
      'acct',
      'swapon',
      'reboot',
      'settimeofday',
      'clock_settime',
      'adjtimex',
      'clock_adjtime',
      'iopl',
      'ioperm',
      'quotactl',
      'lookup_dcookie',
      'personality',
      'mbind',
      'set_mempolicy',
      'move_pages',
      'syslog',
      'uselib',
      'ustat',
      'sysfs',
      '_sysctl',
      'fanotify_init',
      'io_uring_setup',
    ])
      expect(unconditional.has(closed), closed).toBe(false);
  });

  it('names no architecture, so the engine builds a native-only filter (foreign ABIs are killed)', () => {
    // With `architectures`/`archMap` absent, runc's libseccomp filter holds the native
    // architecture only and its bad-architecture action kills: an i386 `int 0x80` or an x32
    // syscall never reaches the rules. Docker's own default profile lists x86 and x32 (allowed).
    const profile = JSON.parse(seccompProfileJson()) as Record<string, unknown>;
    expect(profile).not.toHaveProperty('architectures');
    expect(profile).not.toHaveProperty('archMap');
  });
});

describe.skipIf(!filterBuilt || process.arch !== 'x64')('the compiled BPF filter (bwrap)', () => {
  let program: Buffer;
  beforeAll(async () => {
    program = await readFile(SECCOMP_FILTER);
  });

  it('kills any syscall made through a foreign architecture, whatever its number', () => {
    for (const arch of [AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM])
      for (const nr of [1, 20, 39, 252]) {
        const ret = runBpf(program, { nr, arch });
        expect(killed(ret), `arch ${arch.toString(16)} nr ${nr}: ${ret.toString(16)}`).toBe(true);
      }
  });

  it('never allows an x32 syscall (the native arch with bit 30 set)', () => {
    for (const nr of [0, 1, 39, 59]) {
      const ret = runBpf(program, { nr: nr | 0x40000000, arch: AUDIT_ARCH_X86_64 });
      expect((ret & SECCOMP_RET_ACTION_FULL) >>> 0, `nr ${nr}`).not.toBe(SECCOMP_RET_ALLOW);
    }
  });

  it('allows native getpid and answers native keyctl with EPERM (the evaluator reads the rules)', () => {
    expect(runBpf(program, { nr: 39, arch: AUDIT_ARCH_X86_64 })).toBe(SECCOMP_RET_ALLOW);
    expect(runBpf(program, { nr: 250, arch: AUDIT_ARCH_X86_64 })).toBe(SECCOMP_RET_ERRNO | 1);
  });
});

describe.skipIf(skip)('bwrap driver and its seccomp filter', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-seccomp-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('refuses to start without the filter, saying how to build it', async () => {
    const missing = path.join(dir, 'absent.bpf');
    const start = createSandbox(
      testSandboxConfig('bwrap', dir, { pool: { size: 0 }, bwrap: { seccompFilter: missing } }),
    );
    await expect(start).rejects.toMatchObject({
      code: 'driver_unavailable',
      message: expect.stringContaining(`seccomp filter ${missing} is missing`) as string,
    });
  });

  it('refuses a file that is not a BPF program', async () => {
    const bad = path.join(dir, 'bad.bpf');
    await writeFile(bad, 'not bpf');
    const start = createSandbox(
      testSandboxConfig('bwrap', dir, { pool: { size: 0 }, bwrap: { seccompFilter: bad } }),
    );
    await expect(start).rejects.toMatchObject({
      code: 'driver_unavailable',
      message: expect.stringContaining('is not a BPF program') as string,
    });
  });

  it('runs without it only when configured off, and still allows no user namespace', async () => {
    const sandbox = await createSandbox(
      testSandboxConfig('bwrap', dir, {
        pool: { size: 0 },
        bwrap: { seccomp: false, seccompFilter: path.join(dir, 'absent.bpf') },
      }),
    );
    try {
      const r = await sandbox.run({
        image: 'shell',
        argv: ['bash', '-c', 'unshare -Urn true 2>&1; echo "unshare=$?"'],
      });
      // --disable-userns on its own: the limit bwrap sets inside, not the filter, refuses it.
      expect(r.stdout).toContain('No space left on device');
      expect(r.stdout).toContain('unshare=1');
    } finally {
      await sandbox.close();
    }
  });
});
