import { BUDGET_METRICS, type BudgetUse, type Budgets, type RedisClient } from '@toolgate/calls';
import { Router } from 'express';
import type { BudgetReport, BudgetView } from '../api-types.js';
import { ApiError } from '../errors.js';
import { clientOf } from '../http.js';
import { guardRedis } from '../pipeline.js';

/** A caller's use as the API shows it: per metric, each window with what is left and when it resets. */
export function budgetView(use: BudgetUse | undefined): BudgetView {
  const view: BudgetView = {};
  for (const metric of BUDGET_METRICS) {
    const m = use?.[metric];
    if (!m) continue;
    view[metric] = m.windows.map((w) => ({
      window: w.window,
      used: w.used,
      limit: w.limit,
      remaining: Math.max(0, w.limit - w.used),
      resetsAt: new Date(w.resetsAt).toISOString(),
    }));
  }
  return view;
}

/**
 * GET /v1/budget (docs/budgets.md): a client its own spend against `limits.budget`, and with a
 * user's token that user's against `limits.perUser.budget`; admins every client's that has a
 * budget, or one client's with `?client=`.
 */
export function budgetRoutes(
  redis: RedisClient,
  budgets: Budgets,
  clientIds: ReadonlySet<string>,
): Router {
  const router = Router();
  router.get('/v1/budget', async (req, res) => {
    const client = clientOf(res);
    const filter = req.query.client;
    if (filter !== undefined && (typeof filter !== 'string' || !clientIds.has(filter))) {
      throw new ApiError('invalid_request', '"client" must be the id of a configured client');
    }
    if (!client.admin && filter !== undefined && filter !== client.id) {
      throw new ApiError('forbidden', "only admin clients may read another client's budget");
    }
    if (client.admin && filter === undefined) {
      const ids = [...clientIds].filter((id) => budgets.has(id));
      const clients = await guardRedis(
        () =>
          Promise.all(
            ids.map(async (id) => ({
              client: id,
              budget: budgetView((await budgets.use(id)).client),
            })),
          ),
        redis,
      );
      res.json({ clients } satisfies BudgetReport);
      return;
    }
    const id = filter ?? client.id;
    // A user's own budget only for its own client's calls.
    const user = id === client.id ? client.user : undefined;
    const use = await guardRedis(() => budgets.use(id, user), redis);
    const body: BudgetReport = {
      client: id,
      budget: budgetView(use.client),
      ...(user === undefined ? {} : { user: { id: user, budget: budgetView(use.user) } }),
    };
    res.json(body);
  });
  return router;
}
