/**
 * Admin-only: the secret store (docs/credentials.md). Values are write-only: PUT seals one,
 * GET lists names and update times, DELETE removes; no route ever answers a value. Each set
 * and delete is an audit entry naming the secret, never its value.
 */
import type { AuditLog, RedisClient } from '@toolgate/calls';
import { SecretError, type SecretStore } from '@toolgate/secrets';
import { Router, type Request } from 'express';
import type { SecretList, SecretSaved } from '../api-types.js';
import { actorOf } from '../clients.js';
import { ApiError } from '../errors.js';
import { clientOf, objectBody, requireAdmin } from '../http.js';
import { guardRedis } from '../pipeline.js';

/** `?user=`, given at most once. */
function userParam(req: Request): string | undefined {
  const v = req.query.user;
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ApiError('invalid_request', '"user" must be given once');
  return v;
}

/** The store's refusals as API errors, their codes kept. */
function toApiError(err: unknown): unknown {
  if (!(err instanceof SecretError)) return err;
  const code =
    err.code === 'invalid_user'
      ? 'invalid_request'
      : err.code === 'secret_not_found'
        ? 'not_found'
        : err.code === 'secret_unreadable'
          ? 'internal'
          : err.code;
  return new ApiError(code, err.message, { details: err.details, cause: err });
}

export function secretRoutes(deps: {
  redis: RedisClient;
  store: SecretStore;
  audit: AuditLog;
  clientIds: ReadonlySet<string>;
}): Router {
  const { redis, store, audit, clientIds } = deps;
  const router = Router();
  router.use('/v1/secrets', requireAdmin);

  const clientParam = (req: Request): string => {
    const client = (req.params as { client: string }).client;
    if (!clientIds.has(client)) throw new ApiError('not_found', `no client with id "${client}"`);
    return client;
  };
  const run = <T>(fn: () => Promise<T>): Promise<T> =>
    guardRedis(fn, redis).catch((err: unknown) => {
      throw toApiError(err);
    });
  const record = (fields: {
    client: string;
    name: string;
    user: string | undefined;
    status: 'set' | 'deleted';
    by: string;
  }) =>
    audit.append(
      audit.entry({
        event: 'secret',
        client: fields.client,
        tool: '',
        status: fields.status,
        secret: fields.name,
        ...(fields.user === undefined ? {} : { user: fields.user }),
        by: fields.by,
      }),
    );

  router.get('/v1/secrets/:client', async (req, res) => {
    const client = clientParam(req);
    const user = userParam(req);
    const secrets = await run(() => store.list(client, user));
    const body: SecretList = { client, ...(user === undefined ? {} : { user }), secrets };
    res.json(body);
  });

  router.put('/v1/secrets/:client/:name', async (req, res) => {
    const client = clientParam(req);
    const { name } = req.params as { name: string };
    const user = userParam(req);
    const body = objectBody(req);
    const extra = Object.keys(body).filter((k) => k !== 'value');
    if (extra.length > 0) {
      throw new ApiError(
        'invalid_request',
        `unknown field "${extra[0]}": the body is {"value": "…"}`,
      );
    }
    const { created, updatedAt } = await run(() => store.set(client, name, body.value, user));
    await run(() => record({ client, name, user, status: 'set', by: actorOf(clientOf(res)) }));
    const saved: SecretSaved = { client, name, ...(user === undefined ? {} : { user }), updatedAt };
    res.status(created ? 201 : 200).json(saved);
  });

  router.delete('/v1/secrets/:client/:name', async (req, res) => {
    const client = clientParam(req);
    const { name } = req.params as { name: string };
    const user = userParam(req);
    const removed = await run(() => store.delete(client, name, user));
    if (!removed) throw new ApiError('not_found', `no secret "${name}" for this owner`);
    await run(() => record({ client, name, user, status: 'deleted', by: actorOf(clientOf(res)) }));
    res.status(204).end();
  });
  return router;
}
