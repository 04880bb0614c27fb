/**
 * @toolgate/sandbox: runs one program per call in a throwaway sandbox (docs/spec.md §5). The driver is
 * chosen once here; the docker driver (and dockerode) is only loaded when it is the one.
 */
import { request } from 'node:http';
import { BwrapDriver } from './bwrap.js';
import { parseSandboxConfig, type SandboxConfig, type SandboxConfigInput } from './config.js';
import { SandboxError } from './errors.js';
import type { DriverName, DriverOptions, SandboxDriver } from './types.js';
import { hostLockFile } from './mounts.js';
import { Workspaces, type WorkspaceOptions } from './workspaces.js';

/** What tools and the worker hold: a started driver plus the config it runs with. */
export interface Sandbox extends SandboxDriver {
  readonly config: SandboxConfig;
}

/**
 * Parses the config (filling defaults), picks the driver — `auto` is docker when its socket
 * answers, else bwrap — and starts it (image checks, reaper, warm pool filling in background).
 */
export async function createSandbox(
  config: SandboxConfig | SandboxConfigInput = {},
  options: DriverOptions = {},
): Promise<Sandbox> {
  const parsed = parseSandboxConfig(config as SandboxConfigInput);
  const name = await chooseDriver(parsed);
  let driver: SandboxDriver;
  if (name === 'docker') {
    const { DockerDriver } = await import('./docker.js');
    driver = new DockerDriver(parsed, options);
  } else {
    driver = new BwrapDriver(parsed, options);
  }
  await driver.start();
  return Object.assign(driver, { config: parsed }) as Sandbox;
}

export async function chooseDriver(config: SandboxConfig): Promise<DriverName> {
  if (config.driver !== 'auto') return config.driver;
  if (await dockerAnswers(config.docker.socketPath)) return 'docker';
  if (await BwrapDriver.available()) return 'bwrap';
  throw new SandboxError(
    'driver_unavailable',
    `no sandbox driver: Docker does not answer on ${config.docker.socketPath} and bwrap is unavailable`,
  );
}

/** GET /_ping on the Docker socket, without loading dockerode. */
export function dockerAnswers(socketPath: string, timeoutMs = 1500): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request(
      { socketPath, path: '/_ping', method: 'GET', timeout: timeoutMs },
      (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

/**
 * The per-client workspaces under config.workspacesRoot, with the configured quota and
 * retention. `extra` adds what the config file does not hold: per-client sizes, admin resets
 * (from Redis), a logger. Start retention with startReaper(); close() stops it.
 */
export function createWorkspaces(
  config: Pick<
    SandboxConfig,
    'workspacesRoot' | 'stateDir' | 'limits' | 'workspaceQuota' | 'workspaceTtlDays'
  >,
  extra: Pick<WorkspaceOptions, 'sizeMbFor' | 'resets' | 'logger'> = {},
): Workspaces {
  return new Workspaces(config.workspacesRoot, {
    quota: config.workspaceQuota,
    size: { mb: config.limits.workspaceMb, inodes: config.limits.workspaceInodes },
    lockFile: hostLockFile(config.stateDir),
    ttlDays: config.workspaceTtlDays,
    // The longest a call can run, plus its start and teardown.
    busyMs: config.limits.maxTimeoutMs + 60_000,
    ...extra,
  });
}

export { BwrapDriver } from './bwrap.js';
export {
  SandboxConfigSchema,
  SandboxLimitsSchema,
  SandboxImageSchema,
  parseSandboxConfig,
  sandboxConfigProblems,
} from './config.js';
export { SandboxError } from './errors.js';
export { CHANNEL_DIR, CHANNEL_SOCKET } from './channel.js';
export type { ChannelHandler } from './channel.js';
export { mountTable } from './mounts.js';
export {
  Workspaces,
  WorkspacePathError,
  normalizeRelative,
  SANDBOX_UID,
  SANDBOX_GID,
  WORKSPACE_MOUNT,
} from './workspaces.js';

export type { SandboxConfig, SandboxConfigInput, SandboxLimits, SandboxImage } from './config.js';
export type { SandboxErrorCode } from './errors.js';
export type {
  DriverName,
  DriverOptions,
  EgressCredentials,
  EgressMeter,
  EgressProxyHandle,
  OpenRequest,
  OutputStream,
  ProcessExit,
  ProcessSignal,
  ProcessStats,
  ResourceLimits,
  RunRequest,
  RunPhases,
  RunResult,
  SandboxDriver,
  SandboxHooks,
  SandboxLogger,
  SandboxProcess,
  SandboxStats,
  StartEgressProxy,
} from './types.js';
export type {
  PathErrorReason,
  ResolvedPath,
  WorkspaceOptions,
  WorkspaceResetSource,
} from './workspaces.js';
export type { QuotaSize } from './workspace-images.js';
