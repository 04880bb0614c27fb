import { isConnectionLost, liveWorkers, type Keys, type RedisClient } from '@toolgate/calls';
import type { Logger } from '@toolgate/log';
import type { PolicyState } from '@toolgate/policy';
import { Router } from 'express';

/** How long /readyz waits for Redis: a probe must answer, even while Redis fails over. */
const READY_TIMEOUT_MS = 2000;

/**
 * `/healthz` and `/readyz`, answered without a key. A failed probe's answer is a fixed reason:
 * the Redis error text can name Redis's address (a `MOVED` names a node), so it goes to the
 * log, not to whoever can reach the port.
 */
export function healthRoutes(
  /** Each shard's connection (one without `redis.shards`); `sharded`: name them. */
  shards: readonly { id: string; redis: RedisClient; keys: Keys }[],
  sharded: boolean,
  log: Logger,
  upstreams?: () => Record<string, { state: string }>,
  /** Stdio upstreams: each worker's server (state, restarts), as the workers last wrote it. */
  stdio?: () => Record<string, { state: string; restarts: number }[]>,
  /** The active Cedar policy set (`policy.cedar`): its hash, and whether a reload failed. */
  policy?: () => PolicyState,
): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    const probes = await Promise.all(shards.map((s) => probe(s.redis, s.keys, log, s.id)));
    // Ready while any shard answers: one shard down takes only its own clients down (503
    // shard_unavailable to them), named here, never the gateway (docs/sharding.md).
    const up = probes.filter((p): p is { workers: number } => 'workers' in p);
    if (up.length === 0) {
      const reason = (probes[0] as { reason: string }).reason;
      res.status(503).json({
        status: 'unavailable',
        reason,
        ...(sharded ? { shards: shardStates(shards, probes) } : {}),
      });
      return;
    }
    // Workers serve every shard: the fewest any shard sees serve them all.
    const workers = Math.min(...up.map((p) => p.workers));
    if (workers === 0) {
      res.status(503).json({ status: 'unavailable', reason: 'no worker is alive' });
      return;
    }
    // An upstream that is down takes only its own tools down: named, never unready. Its state
    // only (the error, which can name an address, is logged).
    const states = upstreams?.();
    const servers = stdio?.();
    res.json({
      status: 'ready',
      workers,
      ...(sharded ? { shards: shardStates(shards, probes) } : {}),
      ...(states
        ? { upstreams: Object.fromEntries(Object.entries(states).map(([id, s]) => [id, s.state])) }
        : {}),
      ...(servers && Object.keys(servers).length > 0 ? { stdio: servers } : {}),
      ...(policy ? { policy: policySummary(policy()) } : {}),
    });
  });
  return router;
}

/**
 * The set each gateway decides with: equal hashes, equal sets. A refused reload is told, not
 * its text (policy snippets): that is in the log and `toolgate_policy_reload_failures_total`.
 */
function policySummary(state: PolicyState) {
  return {
    hash: state.hash,
    policies: state.policies,
    loadedAt: new Date(state.loadedAt).toISOString(),
    ...(state.lastError === undefined
      ? {}
      : {
          reloadFailed: true,
          reason:
            'the policy files on disk are invalid: the last good set keeps deciding (see the log)',
        }),
  };
}

type Probe = { workers: number } | { reason: string };

/** Whether one shard answers, and how many workers it sees; a fixed reason when not. */
async function probe(redis: RedisClient, keys: Keys, log: Logger, shard: string): Promise<Probe> {
  // Lost and reconnecting (a failover under way): say so now rather than let the read wait
  // in the offline queue for the new master.
  if (isConnectionLost(redis)) {
    log.warn({ redisStatus: redis.status, shard }, 'not ready: Redis connection lost');
    return { reason: 'Redis connection lost' };
  }
  // Reading the worker set (not a PING) asks the node that holds toolgate's keys: on a
  // Cluster, the master of the prefix's slot, which a PING to any node would not.
  let timer: NodeJS.Timeout | undefined;
  try {
    const workers = await Promise.race([
      liveWorkers(redis, keys),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`no answer within ${READY_TIMEOUT_MS} ms`)),
          READY_TIMEOUT_MS,
        );
      }),
    ]);
    return { workers };
  } catch (err) {
    log.warn({ err: (err as Error).message, shard }, 'not ready: Redis does not answer');
    return { reason: 'Redis does not answer' };
  } finally {
    clearTimeout(timer);
  }
}

/** Each shard's state for /readyz: up with its worker count, or down with the fixed reason. */
function shardStates(shards: readonly { id: string }[], probes: Probe[]) {
  return Object.fromEntries(
    shards.map((s, i) => {
      const p = probes[i]!;
      return [
        s.id,
        'workers' in p ? { state: 'up', workers: p.workers } : { state: 'down', reason: p.reason },
      ];
    }),
  );
}
