/**
 * A stack whose worker runs code mode: a real sandbox (docker when it answers, else bwrap), and
 * the gateway on a port chosen first so `codeMode.gatewayUrl` can name it.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createSandbox, createWorkspaces, type Sandbox } from '@toolgate/sandbox';
import { testSandboxConfig, whyDriverUnavailable } from '@toolgate/sandbox/testing';
import { freePort } from './redis-server.js';
import { startStack, type Stack, type StackOptions } from './stack.js';

/** undefined when some driver can run code mode here, else why not. */
export async function whyNoCodeMode(): Promise<string | undefined> {
  const docker = await whyDriverUnavailable('docker');
  if (!docker) return undefined;
  const bwrap = await whyDriverUnavailable('bwrap');
  return bwrap ? `${docker}; ${bwrap}` : undefined;
}

export async function startCodeModeStack(
  options: StackOptions & { codeMode?: Record<string, unknown> } = {},
): Promise<{ stack: Stack; sandbox: Sandbox; close(): Promise<void> }> {
  const driver = (await whyDriverUnavailable('docker')) === undefined ? 'docker' : 'bwrap';
  const dir = await mkdtemp(path.join(tmpdir(), 'tg-codemode-'));
  await chmod(dir, 0o711); // the sandbox's uid reaches the workspaces and the channel (bwrap)
  const sandbox = await createSandbox(testSandboxConfig(driver, dir));
  await sandbox.warmUp(60_000);
  const port = await freePort();
  const { codeMode, ...rest } = options;
  const stack = await startStack({
    ...rest,
    port,
    services: { sandbox, workspaces: createWorkspaces(sandbox.config), ...rest.services },
    config: {
      ...rest.config,
      codeMode: { gatewayUrl: `http://127.0.0.1:${port}`, ...codeMode },
    },
  });
  return {
    stack,
    sandbox,
    async close() {
      await stack.close();
      await sandbox.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
