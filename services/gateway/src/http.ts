import type { AuditLog } from '@toolgate/calls';
import type { NextFunction, Request, Response } from 'express';
import type { RedisClient } from '@toolgate/calls';
import { AuthServerError } from './auth/fetch-json.js';
import type { OAuthResource } from './auth/oauth.js';
import { TokenRefused } from './auth/verifier.js';
import type { Client, Clients } from './clients.js';
import { ApiError } from './errors.js';
import type { AuthFailures } from './policy/auth-failures.js';
import { Prepaid, type CallLimits } from './policy/limits.js';

/**
 * Bearer auth: a client's API key, or (with `auth.oauth`) an OAuth access token; the client
 * lands in `res.locals.client`. A missing, unknown or invalid credential is counted against
 * the source address (`req.ip`: the socket's peer unless `server.trustProxy`) and answered
 * 401, or 429 once the address is over its budget. With OAuth on, a 401 carries the
 * `WWW-Authenticate` challenge that leads a client to the authorization server (docs/auth.md).
 */
export function authenticate(
  clients: Clients,
  failures?: AuthFailures,
  options: {
    oauth?: OAuthResource;
    apiKeys?: boolean;
    /** Where the key or token is (default: the bearer header); the queue board adds a cookie. */
    credential?: (req: Request) => string | undefined;
    /** The 401's message when there is none. */
    missing?: string;
  } = {},
) {
  const { oauth, apiKeys = true, credential = bearerToken } = options;
  const refuse = (req: Request, next: NextFunction, unauthorized: ApiError): void => {
    if (!failures) return next(unauthorized);
    failures.fail(req.ip ?? req.socket.remoteAddress ?? 'unknown', unauthorized).then(next, next);
  };
  return (req: Request, res: Response, next: NextFunction): void => {
    const token = credential(req);
    // An API key is a hash and a map lookup: tried first, before any token work.
    const client = token !== undefined && apiKeys ? clients.authenticate(token) : undefined;
    if (client) {
      res.locals.client = client;
      return next();
    }
    if (!oauth) {
      return refuse(
        req,
        next,
        new ApiError(
          'unauthorized',
          token !== undefined
            ? 'unknown API key'
            : (options.missing ?? 'missing "Authorization: Bearer <key>" header'),
        ),
      );
    }
    if (token === undefined) {
      const unauthorized = new ApiError(
        'unauthorized',
        options.missing ?? 'missing "Authorization: Bearer <token>" header',
        { headers: { 'WWW-Authenticate': oauth.challenge() } },
      );
      return refuse(req, next, unauthorized);
    }
    oauth.authenticate(token).then(
      (tokenClient) => {
        res.locals.client = tokenClient;
        next();
      },
      (err: unknown) => {
        if (err instanceof AuthServerError)
          return next(
            new ApiError('unavailable', 'the authorization server could not be reached', {
              cause: err,
              headers: { 'Retry-After': '5' },
            }),
          );
        const reason =
          err instanceof TokenRefused ? err.message : 'the token could not be verified';
        const refusal = err instanceof TokenRefused ? err.code : undefined;
        const message = apiKeys ? `unknown API key, and not a valid token: ${reason}` : reason;
        refuse(
          req,
          next,
          new ApiError('unauthorized', message, {
            details: {
              error: 'invalid_token',
              reason,
              ...(refusal === undefined ? {} : { refusal }),
            },
            headers: { 'WWW-Authenticate': oauth.challenge(reason) },
          }),
        );
      },
    );
  };
}

/**
 * Every authenticated request costs one call of its client's rate, charged here, before the
 * body is read or anything else is done; a client over its rate gets 429 for any request. The
 * tool call the request then makes uses this charge (`Prepaid`). Usually no Redis round trip:
 * the rate is counted in slices. With Redis unreachable the request goes on uncharged (listings
 * still work; calls need Redis and are refused further on). A request is charged once.
 */
export function chargeRequests(limits: CallLimits, redis: RedisClient, audit: AuditLog) {
  return (req: Request, res: Response, next: NextFunction): void => {
    // Charged once: an admin's request charged on the admin's shard and then served on another
    // shard's router (docs/sharding.md, admin views) is not charged again there.
    if (res.locals.prepaid !== undefined) return next();
    if (redis.status !== 'ready') return next();
    const client = clientOf(res);
    limits.consume(client, 1).then(
      () => {
        res.locals.prepaid = new Prepaid();
        next();
      },
      (err: unknown) => {
        if (!(err instanceof ApiError)) return next(); // Redis trouble: as if unreachable
        if (limits.firstRefusal(client, err)) {
          const tool = /^\/tools\/([^/]{1,128})\/execute$/.exec(req.path)?.[1] ?? '-';
          audit
            .append(
              audit.entry({
                event: 'refused',
                client: client.id,
                ...(client.user === undefined ? {} : { user: client.user }),
                tool,
                status: err.code,
                reason: `${req.method} ${req.path.slice(0, 200)}: ${err.message}`,
              }),
            )
            .catch(() => undefined);
        }
        next(err);
      },
    );
  };
}

/** The key or token of an `Authorization: Bearer <credential>` header. */
export function bearerToken(req: Request): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(req.get('authorization') ?? '')?.[1];
}

export function clientOf(res: Response): Client {
  return res.locals.client as Client;
}

/** The call this request paid for at the door, if it was charged there. */
export function prepaidOf(res: Response): Prepaid | undefined {
  return res.locals.prepaid as Prepaid | undefined;
}

/**
 * Admin routes: an admin client's API key, or its token with the admin scope (else a step-up
 * naming that scope, docs/auth.md).
 */
export function requireAdmin(_req: Request, res: Response, next: NextFunction): void {
  const client = clientOf(res);
  if (client.admin) return next();
  next(
    client.grant?.adminStepUp() ??
      new ApiError('forbidden', 'this route is for admin clients only'),
  );
}

/** The request body as a JSON object: empty means {}, anything else but an object is 400. */
export function objectBody(req: Request): Record<string, unknown> {
  const body: unknown = req.body;
  if (body === undefined) return {};
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ApiError('invalid_json', 'the request body must be a JSON object');
  }
  return body as Record<string, unknown>;
}

/** Maps anything unexpected onto the API's error shape (the body reader raises ApiErrors). */
export function errorHandler(log: { error: (obj: object, msg: string) => void }) {
  return (err: unknown, _req: Request, res: Response, _next: NextFunction): void => {
    const apiError = toApiError(err);
    if (apiError.status >= 500 && apiError.code !== 'unavailable')
      log.error({ err }, 'request failed');
    if (res.headersSent) return;
    res.status(apiError.status).set(apiError.headers).json(apiError.toBody());
  };
}

function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  // The router's decodeURIComponent of a path parameter (`/v1/calls/%ff`).
  if (err instanceof URIError) {
    return new ApiError('invalid_request', 'the URL path is not valid percent-encoded UTF-8');
  }
  // Other client errors raised by express (http-errors with expose: true).
  const e = err as { status?: unknown; expose?: unknown; message?: unknown } | null;
  if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500 && e.expose === true) {
    return new ApiError('invalid_request', String(e.message));
  }
  return new ApiError('internal', 'internal error', { cause: err });
}

export function notFound(req: Request, _res: Response, next: NextFunction): void {
  next(new ApiError('not_found', `no route ${req.method} ${req.path}`));
}
