/**
 * The sandboxed tools through their handlers, against a real sandbox: docker when it runs
 * here, else bwrap (TOOLGATE_SANDBOX_DRIVER picks one). Isolation itself is test/sandbox's job.
 */
import { chmod, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ToolError, type ToolContext } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox, type Workspaces } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fileDelete,
  fileList,
  fileRead,
  fileWrite,
  runPython,
  runShell,
  sandboxedTools,
} from './index.js';

const wanted = process.env.TOOLGATE_SANDBOX_DRIVER as 'docker' | 'bwrap' | undefined;
const driver =
  wanted ?? ((await whyDriverUnavailable('docker')) === undefined ? 'docker' : 'bwrap');
const unavailable = await whyDriverUnavailable(driver);
if (unavailable) console.warn(`sandboxed tool tests skipped: ${driver}: ${unavailable}`);

describe.skipIf(unavailable !== undefined)(`sandboxed tools (${driver})`, () => {
  let dir: string;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  let seq = 0;
  const ctx = (clientId = 'tools-test', signal = new AbortController().signal): ToolContext => ({
    callId: `call-${++seq}`,
    clientId,
    signal,
    services: { sandbox, workspaces },
  });

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'tg-tools-'));
    await chmod(dir, 0o711); // the sandbox uid must be able to reach the workspaces (bwrap)
    sandbox = await createSandbox(testSandboxConfig(driver, dir));
    workspaces = createWorkspaces(sandbox.config);
    await sandbox.warmUp();
  });
  afterAll(async () => {
    await sandbox?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('exports the six tools, file_delete destructive', () => {
    expect(sandboxedTools.map((t) => t.name)).toEqual([
      'run_python',
      'run_shell',
      'file_read',
      'file_write',
      'file_list',
      'file_delete',
    ]);
    expect(fileDelete.risk).toBe('destructive');
    expect(sandboxedTools.every((t) => t.sandbox?.image)).toBe(true);
  });

  it('run_python returns what the program printed', async () => {
    const r = await runPython.handler(
      { code: 'import numpy, pandas\nprint(numpy.arange(4).sum())' },
      ctx(),
    );
    expect(r).toEqual({
      stdout: '6\n',
      stderr: '',
      exitCode: 0,
      timedOut: false,
      truncated: false,
    });
  });

  it('a failing program is a normal result the model can read', async () => {
    const r = await runPython.handler({ code: 'raise ValueError("boom")' }, ctx());
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toContain('ValueError: boom');
  });

  it('a timeout is a result with timedOut and a note in stderr', async () => {
    const r = await runShell.handler(
      { command: 'echo started; sleep 30', timeoutSeconds: 1 },
      ctx(),
    );
    expect(r).toMatchObject({ stdout: 'started\n', timedOut: true, exitCode: 137 });
    expect(r.stderr).toContain('timeout');
  });

  it('file tools and code tools share the workspace', async () => {
    await fileWrite.handler({ path: 'notes/a.txt', content: 'one\n' }, ctx());
    await fileWrite.handler({ path: 'notes/a.txt', content: 'two\n', append: true }, ctx());
    expect(await fileRead.handler({ path: 'notes/a.txt' }, ctx())).toMatchObject({
      content: 'one\ntwo\n',
      encoding: 'utf-8',
      size: 8,
    });
    const shell = await runShell.handler(
      { command: 'wc -l < notes/a.txt && echo x > notes/b.txt' },
      ctx(),
    );
    expect(shell.stdout.trim()).toBe('2');
    const list = await fileList.handler({ path: 'notes' }, ctx());
    expect(list.entries.map((e) => [e.name, e.type])).toEqual([
      ['a.txt', 'file'],
      ['b.txt', 'file'],
    ]);
    expect(await fileDelete.handler({ path: 'notes' }, ctx())).toEqual({
      path: 'notes',
      deleted: 'directory',
    });
    await expect(fileRead.handler({ path: 'notes/a.txt' }, ctx())).rejects.toMatchObject({
      code: 'not_found',
    });
  });

  it('binary files come back as base64', async () => {
    await runPython.handler({ code: 'open("bin.dat","wb").write(bytes(range(256)))' }, ctx());
    const r = await fileRead.handler({ path: 'bin.dat' }, ctx());
    expect(r.encoding).toBe('base64');
    expect(Buffer.from(r.content, 'base64')).toHaveLength(256);
  });

  it.each([
    ['/etc/passwd', 'absolute'],
    ['../other/x', 'escapes'],
    ['a/../../x', 'escapes'],
  ])('refuses %s with invalid_path', async (p) => {
    for (const call of [
      () => fileRead.handler({ path: p }, ctx()),
      () => fileWrite.handler({ path: p, content: 'x' }, ctx()),
      () => fileList.handler({ path: p }, ctx()),
      () => fileDelete.handler({ path: p }, ctx()),
    ]) {
      await expect(call()).rejects.toMatchObject({ name: 'ToolError', code: 'invalid_path' });
    }
  });

  it('refuses a symlink leading out, and can delete the link itself', async () => {
    const ws = await workspaces.ensure('tools-test');
    await symlink('/etc/passwd', path.join(ws, 'passwd-link'));
    await expect(fileRead.handler({ path: 'passwd-link' }, ctx())).rejects.toMatchObject({
      code: 'invalid_path',
    });
    await expect(
      fileWrite.handler({ path: 'passwd-link', content: 'x' }, ctx()),
    ).rejects.toMatchObject({ code: 'invalid_path' });
    expect(await fileDelete.handler({ path: 'passwd-link' }, ctx())).toMatchObject({
      deleted: 'symlink',
    });
  });

  /** A ToolContext whose events record each output chunk and when it came. */
  const listening = () => {
    const chunks: { stream: string; text: string; at: number }[] = [];
    const c: ToolContext = {
      ...ctx(),
      events: {
        output: (stream, text) => chunks.push({ stream, text, at: performance.now() }),
        progress: () => undefined,
      },
    };
    return { c, chunks };
  };

  it('run_python streams what it prints to ctx.events while it runs', async () => {
    const { c, chunks } = listening();
    const r = await runPython.handler(
      { code: 'import time\nprint("first")\ntime.sleep(1)\nprint("second")' },
      c,
    );
    const end = performance.now();
    expect(r.stdout).toBe('first\nsecond\n');
    // print() without flush: the first line arrives during the sleep, not at the exit.
    const early = chunks.filter((ch) => end - ch.at > 800);
    expect(early.map((ch) => ch.text).join('')).toBe('first\n');
    expect(chunks.map((ch) => ch.text).join('')).toBe(r.stdout);
  });

  it('run_shell forwards stdout and stderr to ctx.events, each in order', async () => {
    const { c, chunks } = listening();
    const r = await runShell.handler(
      { command: 'for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.1; done' },
      c,
    );
    const of = (stream: string) =>
      chunks
        .filter((ch) => ch.stream === stream)
        .map((ch) => ch.text)
        .join('');
    expect(of('stdout')).toBe('out1\nout2\nout3\n');
    expect(of('stderr')).toBe('err1\nerr2\nerr3\n');
    expect(r).toMatchObject({ stdout: 'out1\nout2\nout3\n', stderr: 'err1\nerr2\nerr3\n' });
  });

  it('a cancelled call kills its sandbox and fails with cancelled', async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    await expect(
      runShell.handler({ command: 'sleep 20' }, ctx('tools-test', ac.signal)),
    ).rejects.toMatchObject({ code: 'cancelled' });
  });

  it('without a sandbox the tools fail with sandbox_error', async () => {
    const bare = {
      callId: 'x',
      clientId: 'y',
      signal: new AbortController().signal,
      services: {},
    } as unknown as ToolContext;
    await expect(runPython.handler({ code: '1' }, bare)).rejects.toBeInstanceOf(ToolError);
    await writeFile(path.join(dir, 'unused'), '');
  });
});
