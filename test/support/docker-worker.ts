import { join } from 'node:path';
import { REPO_ROOT } from '@toolgate/sandbox/testing';

/**
 * The `sandbox` section of a worker process's config on the docker driver, with its state and
 * workspaces under `dir` and the locally built images (the tests that start worker processes
 * of their own: killed, stopped, several at once).
 */
export function dockerSandbox(
  dir: string,
  options: { pool: number; workspaceQuota?: 'off' },
): Record<string, unknown> {
  const rootfs = (name: string) => join(REPO_ROOT, 'deploy/sandbox/.build/rootfs', name);
  return {
    driver: 'docker',
    workspacesRoot: join(dir, 'workspaces'),
    stateDir: join(dir, 'state'),
    images: {
      python: { docker: 'toolgate/sandbox-python:local', rootfs: rootfs('python') },
      shell: { docker: 'toolgate/sandbox-shell:local', rootfs: rootfs('shell') },
    },
    pool: { size: options.pool },
    ...(options.workspaceQuota ? { workspaceQuota: options.workspaceQuota } : {}),
  };
}
