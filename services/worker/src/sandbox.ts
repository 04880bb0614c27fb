import { workerAlive, type Keys } from '@toolgate/calls';
import type { Config } from '@toolgate/config';
import type { Logger } from '@toolgate/log';
import type { ToolServices } from '@toolgate/registry';
import {
  createSandbox,
  createWorkspaces,
  type OpenRequest,
  type RunRequest,
  type RunResult,
  type Sandbox,
  type SandboxProcess,
  type SandboxStats,
  type WorkspaceResetSource,
  type Workspaces,
} from '@toolgate/sandbox';
import { SpanKind, withSpan } from '@toolgate/telemetry';
import { startEgressProxy } from '@toolgate/tools';
import type { RedisClient } from '@toolgate/calls';
import type { WorkerMetrics } from './metrics.js';

/** One `sandbox.run` span per sandboxed run, under the worker's toolgate.execute span. */
export class TracedSandbox implements Sandbox {
  constructor(private readonly inner: Sandbox) {}

  get name() {
    return this.inner.name;
  }

  get config() {
    return this.inner.config;
  }

  start(): Promise<void> {
    return this.inner.start();
  }

  run(request: RunRequest): Promise<RunResult> {
    return withSpan(
      'sandbox.run',
      {
        kind: SpanKind.INTERNAL,
        attributes: { 'sandbox.image': request.image, 'sandbox.driver': this.inner.name },
      },
      async (span) => {
        const result = await this.inner.run(request);
        span.setAttributes({
          'sandbox.exit_code': result.exitCode,
          'sandbox.timed_out': result.timedOut,
          'sandbox.warm': result.warm,
        });
        return result;
      },
    );
  }

  /** Not traced: a long-lived sandbox outlives any one call's span. */
  open(request: OpenRequest): Promise<SandboxProcess> {
    return this.inner.open(request);
  }

  warmUp(timeoutMs?: number): Promise<void> {
    return this.inner.warmUp(timeoutMs);
  }

  stats(): SandboxStats {
    return this.inner.stats();
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  async drainWarm(): Promise<void> {
    await this.inner.drainWarm?.();
  }

  async reap(): Promise<number> {
    return (await this.inner.reap?.()) ?? 0;
  }
}

/**
 * Starts the sandbox driver the config asks for and returns the services sandboxed tools use.
 * Without a usable driver the worker still runs: sandboxed calls then end with a readable
 * `sandbox_error` instead of waiting in the queue. Containers are labelled with the worker's
 * id, and the reaper asks the workers' Redis heartbeats whether their owner lives, so a dead
 * worker's containers go whichever host's worker notices.
 */
export async function startSandbox(
  config: Config,
  logger: Logger,
  metrics: WorkerMetrics,
  shared: {
    redis: RedisClient;
    keys: Keys;
    workerId: string;
    /** Each client's workspace resets (on its shard, docs/sharding.md). */
    resets: WorkspaceResetSource;
  },
): Promise<{
  sandbox: Sandbox | undefined;
  /** Stops workspace retention (after the sandbox is closed). */
  stopWorkspaces?: () => void;
  services: Partial<ToolServices>;
}> {
  const log = logger.child({ component: 'sandbox' });
  // Without rules the proxy makes no CA and sandboxes keep their image's own trust store.
  const credentialRules =
    config.credentials.length > 0 || config.clients.some((c) => (c.credentials?.length ?? 0) > 0);
  let sandbox: Sandbox;
  try {
    sandbox = new TracedSandbox(
      await createSandbox(config.sandbox, {
        logger: log,
        hooks: metrics.sandboxHooks(),
        ownerId: shared.workerId,
        isOwnerAlive: (owner) => workerAlive(shared.redis, shared.keys, owner).catch(() => true),
        // Network-enabled sandboxes reach only what the http tools may (policy.http).
        // Credential rules: their headers go out through the proxy, which terminates HTTPS
        // only to the hosts they name (docs/credentials.md).
        startEgressProxy: (host, identify, credentialsOf, meterOf) =>
          startEgressProxy({
            host,
            identify,
            // Each run's relayed bytes, for its call's egressBytes (docs/budgets.md).
            ...(meterOf ? { meterOf } : {}),
            ...(credentialsOf && credentialRules ? { credentialsOf } : {}),
            policy: config.policy.http,
            maxConnections: config.sandbox.egress.maxConnections,
            maxConnectionsPerClient: config.sandbox.egress.maxConnectionsPerClient,
            log: log.child({ component: 'egress' }),
          }),
      }),
    );
  } catch (err) {
    log.error({ err }, 'no sandbox driver could start; sandboxed tools will answer sandbox_error');
    return { sandbox: undefined, services: {} };
  }
  metrics.setWarmSource(() => sandbox.stats().warm);
  log.info({ driver: sandbox.name, images: Object.keys(sandbox.config.images) }, 'sandbox ready');
  const { workspaces, stop } = startWorkspaces(config, sandbox, logger, shared);
  return { sandbox, stopWorkspaces: stop, services: { sandbox, workspaces } };
}

/**
 * Workspaces with each client's quota, admin resets read from Redis, and retention on the
 * reaper's interval (the same on both drivers, so not inside either). stop() ends retention.
 */
function startWorkspaces(
  config: Config,
  sandbox: Sandbox,
  logger: Logger,
  shared: { resets: WorkspaceResetSource },
): { workspaces: Workspaces; stop: () => void } {
  const sizes = new Map(
    config.clients.flatMap((c) =>
      c.limits.workspaceMb === undefined ? [] : [[c.id, c.limits.workspaceMb] as const],
    ),
  );
  const workspaces = createWorkspaces(sandbox.config, {
    // A user's own workspace (isolation: user, `<client>@<user>`) has its client's size.
    sizeMbFor: (space) => sizes.get(space.split('@')[0]!),
    resets: shared.resets,
    logger: logger.child({ component: 'workspaces' }),
  });
  // Retention is in days: a pass a minute is plenty, whatever the container reaper does.
  workspaces.startReaper(Math.max(sandbox.config.reaper.intervalMs, 60_000));
  return { workspaces, stop: () => workspaces.close() };
}
