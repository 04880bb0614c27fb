#!/usr/bin/env python3
"""Compiles the sandbox seccomp policy (Docker's profile JSON format) into the raw BPF program
bwrap loads with --seccomp: compile.py <profile.json> <out.bpf>.

Runs inside an image build (deploy/sandbox/seccomp/Dockerfile) with Debian's python3-seccomp,
so the host needs nothing but Docker. The filter covers the native architecture only; a
syscall through another ABI (i386 int 0x80, x32) kills the process, which is stricter than
Docker's multi-arch profile and costs nothing: the images hold 64-bit programs only.
"""
import errno
import json
import sys

import seccomp

OPS = {
    'SCMP_CMP_NE': seccomp.NE,
    'SCMP_CMP_LT': seccomp.LT,
    'SCMP_CMP_LE': seccomp.LE,
    'SCMP_CMP_EQ': seccomp.EQ,
    'SCMP_CMP_GE': seccomp.GE,
    'SCMP_CMP_GT': seccomp.GT,
    'SCMP_CMP_MASKED_EQ': seccomp.MASKED_EQ,
}


def action(name, errno_ret):
    if name == 'SCMP_ACT_ALLOW':
        return seccomp.ALLOW
    if name == 'SCMP_ACT_ERRNO':
        return seccomp.ERRNO(errno_ret)
    raise SystemExit('unsupported action %s' % name)


def main(src, dest):
    with open(src) as f:
        profile = json.load(f)
    default = action(profile['defaultAction'], profile.get('defaultErrnoRet', errno.EPERM))
    filt = seccomp.SyscallFilter(defaction=default)
    skipped = []
    for rule in profile['syscalls']:
        act = action(rule['action'], rule.get('errnoRet', errno.EPERM))
        # Docker's MASKED_EQ: value is the mask, valueTwo the datum — the order libseccomp takes.
        args = [seccomp.Arg(a['index'], OPS[a['op']], a['value'], a.get('valueTwo', 0))
                for a in rule.get('args', [])]
        for name in rule['names']:
            try:
                seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
            except (ValueError, RuntimeError):
                # Unknown to this libseccomp (newer than it): stays at the default, as with runc.
                skipped.append(name)
                continue
            filt.add_rule(act, name, *args)
    with open(dest, 'wb') as out:
        filt.export_bpf(out)
    if skipped:
        print('not in this libseccomp, left at the default action: ' + ' '.join(skipped))


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
