/**
 * BullMQ's own dashboard (Bull Board) at /admin/queues, for operators: the `fast` and `sandbox`
 * queues and each live worker's session queue (of every Redis shard, named after it), read
 * from this gateway's own BullMQ Queue objects. Admin clients only, signed in as on the console (docs/console.md).
 */
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import {
  queueOptions,
  redact,
  WORKER_ALIVE_MS,
  type Keys,
  type RedisClient,
} from '@toolgate/calls';
import { Queue } from 'bullmq';
import { Router, type NextFunction, type Request, type Response } from 'express';
import type { OAuthResource } from '../auth/oauth.js';
import type { Clients } from '../clients.js';
import { ApiError } from '../errors.js';
import { authenticate, bearerToken, requireAdmin } from '../http.js';
import type { AuthFailures } from '../policy/auth-failures.js';

export const QUEUE_BOARD_PATH = '/admin/queues';

/**
 * The console's key for the board's page and its requests, which a browser cannot give a
 * bearer header: HttpOnly (no script reads it), SameSite=Strict (no other site's page sends
 * it), only under QUEUE_BOARD_PATH, for half a day at most.
 */
const COOKIE = 'toolgate_board';
const COOKIE_MAX_AGE_S = 12 * 3600;

/** The shared queues; each worker hosting sessions also has its own (`Keys.sessionQueue`). */
const SHARED_QUEUES = ['fast', 'sandbox'] as const;
/** How often the list of session queues follows the live workers (on the board's requests). */
const SYNC_EVERY_MS = 5_000;

/**
 * Like the console's: nothing from another origin, no framing. Bull Board's page keeps a few
 * inline styles and sets `<base href>`, hence `'unsafe-inline'` styles and `base-uri 'self'`.
 */
export const QUEUE_BOARD_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
  "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; object-src 'none'; " +
  "base-uri 'self'; frame-ancestors 'none'; form-action 'self'";

/** One Redis shard's queues: its command connection (the board's Queue objects share it). */
export interface BoardShard {
  id: string;
  redis: RedisClient;
  keys: Keys;
}

export interface QueueBoardOptions {
  /**
   * Every shard (docs/sharding.md). With more than one, each queue is named after its shard
   * (`s1:fast`) and the board groups them by shard.
   */
  shards: readonly BoardShard[];
  /** `server.queueDashboard.actions`: off, every queue is read-only and writes are refused. */
  actions: boolean;
  clients: Clients;
  failures: AuthFailures;
  oauth?: OAuthResource;
  apiKeys: boolean;
  log: { debug: (obj: object, msg: string) => void };
}

export interface QueueBoard {
  router: Router;
  /** Closes the board's Queue objects (not the connection they share). */
  close(): Promise<void>;
}

export function queueBoard(o: QueueBoardOptions): QueueBoard {
  const queues = new BoardQueues(o);
  const server = new ExpressAdapter().setBasePath(QUEUE_BOARD_PATH);
  const board = createBullBoard({
    queues: queues.initial(),
    serverAdapter: server,
    options: {
      uiConfig: {
        boardTitle: 'toolgate queues',
        miscLinks: [{ text: 'Console', url: '/console/' }],
        hideDocsLink: true,
        // A CLIENT LIST per queue on every poll: too much on a Redis shared by a fleet.
        showWorkers: false,
      },
    },
  });
  queues.attach(board);
  withoutWebFonts(server);

  const signedIn = authenticate(o.clients, o.failures, {
    apiKeys: o.apiKeys,
    ...(o.oauth ? { oauth: o.oauth } : {}),
    credential: (req) => bearerToken(req) ?? cookieOf(req),
    missing:
      'sign in to the console with an admin key and follow its Queues link, or send "Authorization: Bearer <admin key>"',
  });

  const router = Router();
  router.use(QUEUE_BOARD_PATH, (_req, res, next) => {
    res.set({
      'content-security-policy': QUEUE_BOARD_CSP,
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'cross-origin-opener-policy': 'same-origin',
      'cache-control': 'no-store',
    });
    next();
  });
  // Anyone may drop the cookie; the console does on sign-out.
  router.post(`${QUEUE_BOARD_PATH}/sign-out`, (req, res) => {
    res
      .set('set-cookie', cookie(req, '', 0))
      .status(204)
      .end();
  });
  router.use(QUEUE_BOARD_PATH, signedIn, requireAdmin);
  // The console, holding the admin's key, hands it to the board's pages as the cookie.
  router.post(`${QUEUE_BOARD_PATH}/sign-in`, (req, res) => {
    const key = bearerToken(req);
    if (key === undefined)
      throw new ApiError('unauthorized', 'sign in with "Authorization: Bearer <admin key>"');
    res
      .set('set-cookie', cookie(req, key, COOKIE_MAX_AGE_S))
      .status(204)
      .end();
  });
  router.use(`${QUEUE_BOARD_PATH}/api`, (req, _res, next) => {
    if (req.method === 'GET' || req.method === 'HEAD') return next();
    if (!o.actions)
      throw new ApiError(
        'forbidden',
        'the queue dashboard is read-only (server.queueDashboard.actions is off)',
      );
    // The cookie rides along with any request the browser makes: a write it carries must
    // come from the board's own page. A bearer header is never sent on its own.
    if (bearerToken(req) === undefined && !sameOrigin(req))
      throw new ApiError('forbidden', 'queue dashboard actions are taken from its own page only');
    next();
  });
  router.use(QUEUE_BOARD_PATH, (_req: Request, _res: Response, next: NextFunction) => {
    queues.sync().then(() => next(), next);
  });
  router.use(QUEUE_BOARD_PATH, server.getRouter() as Router);
  return { router, close: () => queues.close() };
}

/**
 * The board's Queue objects: the shared ones always, a session queue per live worker (from
 * the heartbeat set), refreshed at most every SYNC_EVERY_MS while someone looks.
 */
class BoardQueues {
  private readonly open = new Map<string, Queue>();
  private board: ReturnType<typeof createBullBoard> | undefined;
  private syncedAt = 0;
  private syncing: Promise<void> | undefined;

  constructor(private readonly o: QueueBoardOptions) {}

  initial(): BullMQAdapter[] {
    return this.o.shards.flatMap((shard) =>
      SHARED_QUEUES.map((kind) =>
        this.adapter(
          shard,
          kind,
          kind === 'fast' ? 'calls of in-process tools' : 'calls of sandboxed tools',
        ),
      ),
    );
  }

  private get sharded(): boolean {
    return this.o.shards.length > 1;
  }

  /** The board's name of a shard's queue: the queue's own, after its shard's id when sharded. */
  private boardName(shard: BoardShard, queue: string): string {
    return this.sharded ? `${shard.id}:${queue}` : queue;
  }

  attach(board: ReturnType<typeof createBullBoard>): void {
    this.board = board;
  }

  sync(): Promise<void> {
    if (Date.now() - this.syncedAt < SYNC_EVERY_MS) return Promise.resolve();
    this.syncing ??= this.follow().finally(() => {
      this.syncing = undefined;
    });
    return this.syncing;
  }

  async close(): Promise<void> {
    const all = [...this.open.values()];
    this.open.clear();
    await Promise.all(all.map((q) => q.close().catch(() => undefined)));
  }

  private async follow(): Promise<void> {
    const wanted = new Map<string, { shard: BoardShard; queue: string; worker: string }>();
    const shared = new Set<string>();
    let read = 0;
    for (const shard of this.o.shards) {
      for (const kind of SHARED_QUEUES) shared.add(this.boardName(shard, kind));
      let workers: string[];
      try {
        workers = await shard.redis.zrangebyscore(
          shard.keys.workers,
          Date.now() - WORKER_ALIVE_MS,
          '+inf',
        );
      } catch (err) {
        // Redis away: the board shows what it had of this shard, and says so on its requests.
        this.o.log.debug({ err, shard: shard.id }, 'queue board: could not list the live workers');
        for (const name of this.open.keys())
          if (name.startsWith(this.boardName(shard, ''))) shared.add(name);
        continue;
      }
      read++;
      for (const worker of workers) {
        const queue = shard.keys.sessionQueue(worker);
        wanted.set(this.boardName(shard, queue), { shard, queue, worker });
      }
    }
    if (read === 0) return;
    this.syncedAt = Date.now();
    for (const name of [...this.open.keys()]) {
      if (shared.has(name) || wanted.has(name)) continue;
      this.board?.removeQueue(name);
      const queue = this.open.get(name);
      this.open.delete(name);
      await queue?.close().catch(() => undefined);
    }
    for (const [name, { shard, queue, worker }] of wanted) {
      if (this.open.has(name)) continue;
      try {
        this.board?.addQueue(
          this.adapter(shard, queue, `calls of the sessions on worker ${worker}`),
        );
      } catch (err) {
        // A worker id BullMQ cannot name a queue after (a ':'): that worker has no such queue.
        this.o.log.debug({ err, name }, 'queue board: skipped a queue');
      }
    }
  }

  private adapter(shard: BoardShard, name: string, description: string): BullMQAdapter {
    const queue = new Queue(name, queueOptions(shard.redis, shard.keys));
    queue.on('error', (err) =>
      this.o.log.debug({ err, queue: name, shard: shard.id }, 'queue board: queue error'),
    );
    this.open.set(this.boardName(shard, name), queue);
    const adapter = new BullMQAdapter(queue, {
      readOnlyMode: !this.o.actions,
      description: this.sharded ? `${description}, on shard ${shard.id}` : description,
      ...(this.sharded ? { prefix: `${shard.id}:`, delimiter: ':' } : {}),
    });
    // The arguments as the API shows them (GET /v1/calls/{id}): secret-named fields replaced,
    // secret-shaped text masked.
    adapter.setFormatter('data', (data: unknown) =>
      data !== null && typeof data === 'object' && 'args' in data
        ? { ...data, args: redact(data.args) }
        : data,
    );
    return adapter;
  }
}

function cookieOf(req: Request): string | undefined {
  for (const part of (req.get('cookie') ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0 || part.slice(0, eq).trim() !== COOKIE) continue;
    try {
      const value = decodeURIComponent(part.slice(eq + 1).trim());
      return value === '' ? undefined : value;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

function cookie(req: Request, value: string, maxAgeS: number): string {
  return [
    `${COOKIE}=${encodeURIComponent(value)}`,
    `Path=${QUEUE_BOARD_PATH}`,
    `Max-Age=${maxAgeS}`,
    'HttpOnly',
    'SameSite=Strict',
    ...(req.secure ? ['Secure'] : []),
  ].join('; ');
}

/**
 * A browser's request from a page of this origin: Sec-Fetch-Site says so (every current
 * browser sends it), else the Origin header names this host.
 */
function sameOrigin(req: Request): boolean {
  const site = req.get('sec-fetch-site');
  if (site !== undefined) return site === 'same-origin';
  const origin = req.get('origin');
  return origin !== undefined && origin === `${req.protocol}://${req.get('host') ?? ''}`;
}

type Render = (
  file: string,
  options: object,
  done: (err: Error | null, html?: string) => void,
) => void;

/**
 * Bull Board's page links its fonts from Google's CDN; the CSP would refuse them anyway, and
 * the board's own fallback fonts serve. Its view engine is wrapped to leave the link out, so
 * the page asks nothing of another origin (nor logs a CSP violation).
 */
function withoutWebFonts(server: ExpressAdapter): void {
  const app = server.getRouter() as unknown as {
    engines: Record<string, Render | undefined>;
    engine(ext: string, fn: Render): void;
  };
  const render = app.engines['.ejs'];
  if (!render) return;
  app.engine('ejs', (file, options, done) =>
    render(file, options, (err, html) =>
      done(err, html?.replace(/<link\b[^>]*\bhref="https:\/\/fonts\.googleapis\.com[^>]*>/g, '')),
    ),
  );
}
