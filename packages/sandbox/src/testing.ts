/**
 * Helpers for tests and benches that run real sandboxes (`@toolgate/sandbox/testing`): a config
 * rooted in a temporary directory, and which drivers can run on this host (and why not).
 */
import { access } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { BwrapDriver } from './bwrap.js';
import { parseSandboxConfig, type SandboxConfig, type SandboxConfigInput } from './config.js';
import { dockerAnswers } from './index.js';
import type { DriverName } from './types.js';

/** The repository root (this file is packages/sandbox/src/testing.ts). */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** The compiled seccomp filter scripts/sandbox/build-images.sh writes. */
export const SECCOMP_FILTER = path.join(REPO_ROOT, 'deploy/sandbox/.build/seccomp/sandbox.bpf');

export function testSandboxConfig(
  driver: DriverName,
  dir: string,
  overrides: SandboxConfigInput = {},
): SandboxConfig {
  const rootfs = (name: string) => path.join(REPO_ROOT, 'deploy/sandbox/.build/rootfs', name);
  return parseSandboxConfig({
    driver,
    workspacesRoot: path.join(dir, 'workspaces'),
    stateDir: path.join(dir, 'state'),
    images: {
      python: { docker: 'toolgate/sandbox-python:local', rootfs: rootfs('python') },
      shell: { docker: 'toolgate/sandbox-shell:local', rootfs: rootfs('shell') },
      node: { docker: 'toolgate/sandbox-node:local', rootfs: rootfs('node') },
    },
    // Quotas mount a filesystem per workspace, which `rm -r` of a test directory cannot undo:
    // tests that want them ask (and call Workspaces.unmountAll before removing the directory).
    workspaceQuota: 'off',
    ...overrides,
    pool: { size: 1, sizes: { node: 0 }, ...overrides.pool },
    reaper: { intervalMs: 5_000, ...overrides.reaper },
    bwrap: { seccompFilter: SECCOMP_FILTER, ...overrides.bwrap },
  });
}

/**
 * undefined when the node image (Node.js and the pinned MCP servers) is built for the driver,
 * else the reason it is not.
 */
export async function whyNodeImageUnavailable(driver: DriverName): Promise<string | undefined> {
  const why = await whyDriverUnavailable(driver);
  if (why) return why;
  if (driver === 'docker') {
    const { default: Docker } = await import('dockerode');
    const ok = await new Docker({ socketPath: parseSandboxConfig({}).docker.socketPath })
      .getImage('toolgate/sandbox-node:local')
      .inspect()
      .then(
        () => true,
        () => false,
      );
    return ok
      ? undefined
      : 'image toolgate/sandbox-node:local not built (bash scripts/sandbox/build-images.sh)';
  }
  const node = path.join(REPO_ROOT, 'deploy/sandbox/.build/rootfs/node/opt/toolgate/node/bin/node');
  return (await access(node).then(
    () => true,
    () => false,
  ))
    ? undefined
    : `rootfs ${path.dirname(node)} not built (bash scripts/sandbox/build-images.sh)`;
}

/** undefined when the driver can run here, else the reason it cannot. */
export async function whyDriverUnavailable(driver: DriverName): Promise<string | undefined> {
  const config = parseSandboxConfig({});
  if (driver === 'docker') {
    if (!(await dockerAnswers(config.docker.socketPath)))
      return `Docker does not answer on ${config.docker.socketPath}`;
    const { default: Docker } = await import('dockerode');
    const docker = new Docker({ socketPath: config.docker.socketPath });
    for (const tag of ['toolgate/sandbox-python:local', 'toolgate/sandbox-shell:local']) {
      try {
        await docker.getImage(tag).inspect();
      } catch {
        return `image ${tag} not built (bash scripts/sandbox/build-images.sh)`;
      }
    }
    return undefined;
  }
  if (!(await BwrapDriver.available())) return 'bwrap is missing or cannot create namespaces';
  for (const name of ['python', 'shell']) {
    const dir = path.join(REPO_ROOT, 'deploy/sandbox/.build/rootfs', name);
    if (
      !(await access(path.join(dir, 'usr/bin')).then(
        () => true,
        () => false,
      ))
    ) {
      return `rootfs ${dir} not built (bash scripts/sandbox/build-images.sh)`;
    }
  }
  if (
    !(await access(SECCOMP_FILTER).then(
      () => true,
      () => false,
    ))
  )
    return `seccomp filter ${SECCOMP_FILTER} not built (bash scripts/sandbox/build-images.sh)`;
  return undefined;
}
