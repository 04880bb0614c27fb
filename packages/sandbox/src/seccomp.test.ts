import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox } from './index.js';
import { seccompProfileJson } from './seccomp.js';
import { testSandboxConfig, whyDriverUnavailable } from './testing.js';

const skip = (await whyDriverUnavailable('bwrap')) !== undefined;

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
