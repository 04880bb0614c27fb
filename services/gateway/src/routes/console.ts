import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Series } from '@toolgate/calls';
import express, { Router, type Request, type Response } from 'express';
import type { SeriesView, WhoAmI } from '../api-types.js';
import { ApiError } from '../errors.js';
import { clientOf } from '../http.js';
import { guardRedis } from '../pipeline.js';
import type { RedisClient } from '@toolgate/calls';
import type { ToolRegistry } from '@toolgate/registry';

/**
 * The console's page: no inline scripts or styles, nothing from another origin, no framing.
 * (Charts set styles through the CSSOM, which `style-src 'self'` allows.)
 */
export const CONSOLE_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
  "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; " +
  "frame-ancestors 'none'; form-action 'self'";

/** Where the console's built files are: `console.dir`, else the checkout's or image's `console/dist`. */
export function consoleDir(configured: string): string | undefined {
  // services/gateway/{src,dist}/routes → the workspace root.
  const here = path.dirname(fileURLToPath(import.meta.url));
  const candidate = configured || path.resolve(here, '../../../../console/dist');
  return existsSync(path.join(candidate, 'index.html')) ? candidate : undefined;
}

/**
 * The operator console's files at `/console/` (public: the page asks for a key and sends it as
 * a bearer header to the API), with the client-side routes answered by index.html.
 */
export function consolePages(dir: string | undefined): Router {
  const router = Router();
  const secure = (res: Response) =>
    res.set({
      'content-security-policy': CONSOLE_CSP,
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'cross-origin-opener-policy': 'same-origin',
    });
  // The page's relative asset URLs need the trailing slash.
  router.use((req, res, next) => {
    if (req.method === 'GET' && /^\/console(\?|$)/.test(req.originalUrl)) {
      res.redirect(301, '/console/');
    } else next();
  });
  if (!dir) {
    router.use('/console', (_req, res) => {
      secure(res)
        .status(503)
        .json({
          error: {
            code: 'unavailable',
            message:
              'the console is not built here: run `pnpm --filter @toolgate/console build` (the images build it)',
          },
        });
    });
    return router;
  }
  router.use(
    '/console',
    express.static(dir, {
      index: 'index.html',
      fallthrough: true,
      setHeaders: (res, file) => {
        secure(res as Response);
        // Hashed assets never change; the page itself is always revalidated.
        res.setHeader(
          'cache-control',
          file.endsWith('index.html') ? 'no-cache' : 'public, max-age=31536000, immutable',
        );
      },
    }),
  );
  router.get('/console/{*rest}', (req: Request, res) => {
    if (path.extname(req.path)) throw new ApiError('not_found', `no file ${req.path}`);
    secure(res).set('cache-control', 'no-cache').sendFile(path.join(dir, 'index.html'));
  });
  return router;
}

/** `GET /v1/me` and `GET /v1/series`: what the console asks besides the API it drives. */
export function consoleApi(deps: {
  redis: RedisClient;
  series: Series;
  registry: ToolRegistry;
  traceUrl: string;
  /** Where the queue dashboard is, when on (told to admins). */
  queueDashboard?: string;
  /** Whether Cedar policies are configured (told to admins: the Policies page). */
  policies?: boolean;
}): Router {
  const router = Router();
  router.get('/v1/me', (_req, res) => {
    const client = clientOf(res);
    const body: WhoAmI = {
      client: client.id,
      admin: client.admin,
      ...(client.user === undefined ? {} : { user: client.user }),
      ...(client.grant ? { scopes: [...client.grant.scopes] } : {}),
      ...(deps.traceUrl ? { traceUrl: deps.traceUrl } : {}),
      ...(client.admin && deps.queueDashboard ? { queueDashboard: deps.queueDashboard } : {}),
      ...(client.admin && deps.policies ? { policies: true } : {}),
    };
    res.json(body);
  });
  router.get('/v1/series', async (req, res) => {
    const text = req.query.minutes ?? '60';
    if (typeof text !== 'string' || !/^\d+$/.test(text) || Number(text) < 1 || Number(text) > 120) {
      throw new ApiError('invalid_request', '"minutes" must be an integer from 1 to 120');
    }
    const client = clientOf(res);
    const visible = (name: string) => {
      const tool = deps.registry.get(name);
      return tool !== undefined && client.scope.allows(tool);
    };
    // One user's row: a user's own always; an admin names a client and a user.
    const asked = (name: string) => {
      const v = req.query[name];
      if (v !== undefined && (typeof v !== 'string' || v.length === 0 || v.length > 256))
        throw new ApiError('invalid_request', `"${name}" must be given once, 1 to 256 characters`);
      return v;
    };
    const [askedClient, askedUser] = [asked('client'), asked('user')];
    if (!client.admin && askedUser !== undefined && askedUser !== client.user)
      throw new ApiError('forbidden', 'a caller may only read its own user series');
    if (client.admin && askedUser !== undefined && askedClient === undefined)
      throw new ApiError('invalid_request', '"user" needs "client" (users are per client)');
    const user = client.admin ? askedUser : client.user;
    const owner = client.admin ? (askedUser === undefined ? undefined : askedClient) : client.id;
    const points = await guardRedis(
      () =>
        deps.series.read(
          Number(text),
          visible,
          client.admin && user === undefined ? undefined : owner,
          Date.now(),
          user,
        ),
      deps.redis,
    );
    const body: SeriesView = {
      from: new Date(points.from).toISOString(),
      stepSeconds: 60,
      points: points.points,
      tools: points.tools,
      // The shared gauges are the fleet's, not a client's: admins only.
      queue: client.admin ? points.queue : { fast: [], sandbox: [] },
      workers: client.admin ? points.workers : [],
      warm: client.admin ? points.warm : [],
      ...(points.user ? { user: points.user } : {}),
    };
    res.json(body);
  });
  return router;
}
