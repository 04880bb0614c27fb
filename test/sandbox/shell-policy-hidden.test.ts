/**
 * The shell policy against the real run_shell tool on both drivers: the three forms that hid
 * a blocklisted program from the policy (an expansion's operand, arithmetic, a trap handler)
 * are refused before anything runs. Each program call leaves a file in the workspace when it
 * runs (curl copies a local file with file://, which needs no network), so "did not run" is
 * something the test can see: the same command run without the policy does leave the file.
 *
 * The worker's own path is used (runTool: the precheck, then the handler), with the sandbox and
 * workspaces real. Imports are relative where test/package.json does not list the package.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Tool, ToolContext } from '@toolgate/registry';
import { createSandbox, createWorkspaces, type Sandbox, type Workspaces } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { createToolRegistry, runShell, type ShellPolicy } from '@toolgate/tools';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runTool } from '../../services/worker/src/run-tool.js';

const drivers = ['docker', 'bwrap'] as const;
const reasons = Object.fromEntries(
  await Promise.all(drivers.map(async (d) => [d, await whyDriverUnavailable(d)] as const)),
);
for (const d of drivers)
  if (reasons[d]) console.warn(`hidden-command policy suite: ${d} skipped: ${reasons[d]}`);

const blocklist: ShellPolicy = { mode: 'blocklist', allow: [] };
/** curl writes `file` in the workspace when it runs (and prints 1 for the arithmetic). */
const curl = (file: string) => `curl -s -o ${file} -w 1 file:///etc/hostname`;
const forms = [
  ['an expansion operand', 'ran-operand', `echo \${x:-$(${curl('ran-operand')})}`],
  ['arithmetic', 'ran-arith', `echo $(( $(${curl('ran-arith')}) + 1 ))`],
  ['a trap handler', 'ran-trap', `trap '${curl('ran-trap')}' EXIT; true`],
] as const;

describe.each(drivers)('hidden commands through run_shell: %s driver', (driver) => {
  const skip = reasons[driver] !== undefined;
  let dir: string;
  let sandbox: Sandbox;
  let workspaces: Workspaces;
  let seq = 0;
  const tool = createToolRegistry().get('run_shell') as Tool;
  const ctx = (clientId: string): ToolContext => ({
    callId: `hidden-${driver}-${++seq}`,
    clientId,
    signal: new AbortController().signal,
    services: { sandbox, workspaces },
  });
  /** What a worker does with the call: the policy's precheck, then the handler. */
  const call = (command: string, clientId: string) =>
    runTool(
      tool,
      {
        id: `hidden-${driver}-${++seq}`,
        tool: 'run_shell',
        args: { command },
        clientId,
        acceptedAt: Date.now(),
      },
      { sandbox, workspaces, shellPolicy: blocklist },
      new AbortController().signal,
    );
  const exists = async (file: string, clientId: string) =>
    (await runShell.handler({ command: `test -e ${file} && echo yes || echo no` }, ctx(clientId)))
      .stdout;

  beforeAll(async () => {
    if (skip) return;
    dir = await mkdtemp(path.join(tmpdir(), `tg-hidden-${driver}-`));
    await chmod(dir, 0o711);
    sandbox = await createSandbox(testSandboxConfig(driver, dir));
    workspaces = createWorkspaces(sandbox.config);
    await sandbox.warmUp();
  });
  afterAll(async () => {
    if (skip) return;
    await sandbox.close();
    await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(skip).each(forms)(
    'a program hidden in %s is refused and does not run',
    async (_, file, command) => {
      // Without the policy the form does run curl: the test can see a run.
      const control = `control-${driver}-${file}`;
      const ran = await runShell.handler({ command }, ctx(control));
      expect(ran.exitCode).toBe(0);
      expect(await exists(file, control)).toBe('yes\n');

      const client = `guarded-${driver}-${file}`;
      const outcome = await call(command, client);
      expect(outcome).toMatchObject({
        status: 'error',
        error: { code: 'policy_denied', details: { rule: 'download', program: 'curl' } },
      });
      expect(await exists(file, client)).toBe('no\n');
    },
  );

  it.skipIf(skip)('look-alikes still run', async () => {
    const outcome = await call(
      'x=; echo ${x:-default} $((1+2)); trap - EXIT; trap "echo bye" EXIT; true',
      `lookalike-${driver}`,
    );
    expect(outcome).toMatchObject({
      status: 'ok',
      result: { stdout: 'default 3\nbye\n', exitCode: 0 },
    });
  });
});
