/** Request checks and defaults shared by the drivers. */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import path from 'node:path';
import type { ChannelHandler } from './channel.js';
import type { SandboxConfig, SandboxImage } from './config.js';
import { SandboxError } from './errors.js';
import type {
  EgressCredentials,
  OutputStream,
  ResourceLimits,
  RunRequest,
  SandboxLogger,
} from './types.js';

export interface PreparedRun {
  key: string;
  image: SandboxImage;
  argv: readonly string[];
  stdin: string | Uint8Array | undefined;
  workspace: string | undefined;
  timeoutMs: number;
  network: boolean;
  resources: ResourceLimits;
  /** The resources equal the configured defaults (a warm container fits). */
  defaultResources: boolean;
  outputBytes: number;
  signal: AbortSignal | undefined;
  onOutput: ((stream: OutputStream, text: string) => void) | undefined;
  callId: string | undefined;
  clientId: string | undefined;
  credentials: EgressCredentials | undefined;
  onEgress: ((bytes: number) => void) | undefined;
  channel: ChannelHandler | undefined;
}

export function prepareRun(config: SandboxConfig, request: RunRequest): PreparedRun {
  const image = config.images[request.image];
  if (!image) {
    throw new SandboxError(
      'unknown_image',
      `no sandbox image "${request.image}" (configured: ${Object.keys(config.images).join(', ')})`,
    );
  }
  if (request.argv.length === 0)
    throw new SandboxError('invalid_request', 'argv must not be empty');
  if (request.network && !config.allowNetwork) {
    throw new SandboxError(
      'invalid_request',
      'network access is disabled for sandboxes (sandbox.allowNetwork)',
    );
  }
  if (request.workspace !== undefined && !path.isAbsolute(request.workspace)) {
    throw new SandboxError('invalid_request', 'workspace must be an absolute host path');
  }
  const limits = { ...config.limits, ...definedOnly(request.limits ?? {}) };
  const resources: ResourceLimits = {
    memoryMb: limits.memoryMb,
    cpus: limits.cpus,
    pids: limits.pids,
    fileSizeMb: limits.fileSizeMb,
    tmpfsMb: limits.tmpfsMb,
  };
  const base = config.limits;
  const defaultResources =
    resources.memoryMb === base.memoryMb &&
    resources.cpus === base.cpus &&
    resources.pids === base.pids &&
    resources.fileSizeMb === base.fileSizeMb &&
    resources.tmpfsMb === base.tmpfsMb;
  const timeoutMs = Math.max(1, Math.min(request.timeoutMs ?? base.timeoutMs, base.maxTimeoutMs));
  return {
    key: request.image,
    image,
    argv: request.argv,
    stdin: request.stdin,
    workspace: request.workspace,
    timeoutMs,
    network: request.network ?? false,
    resources,
    defaultResources,
    outputBytes: limits.outputBytes,
    signal: request.signal,
    onOutput: request.onOutput,
    callId: request.callId,
    clientId: request.clientId,
    credentials: request.credentials,
    onEgress: request.onEgress,
    channel: request.channel,
  };
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** host-pid-random: unique per worker process, readable in `docker ps`. */
export function defaultOwnerId(): string {
  const host = hostname()
    .replace(/[^A-Za-z0-9_.-]/g, '_')
    .slice(0, 40);
  return `${host}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/**
 * Whether the worker of a default owner id (`<host>-<pid>-<hex>`) is known to be gone: it ran
 * on this host and no process has its pid. Any other id, or another host's, is not judged here.
 */
export function defaultOwnerGone(owner: string): boolean {
  const m = /^(.*)-(\d+)-[0-9a-f]{6}$/.exec(owner);
  const host = hostname()
    .replace(/[^A-Za-z0-9_.-]/g, '_')
    .slice(0, 40);
  if (!m || m[1] !== host) return false;
  try {
    process.kill(Number(m[2]), 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'EPERM';
  }
}

const noop = () => undefined;
export const silentLogger: SandboxLogger = { debug: noop, info: noop, warn: noop, error: noop };
