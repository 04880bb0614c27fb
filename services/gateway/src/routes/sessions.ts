/**
 * `POST /v1/sessions`, `GET /v1/sessions`, `DELETE /v1/sessions/{id}` (docs/sessions.md): a
 * session's record lives in Redis, its sandbox on the worker picked here; the gateway keeps
 * nothing.
 */
import { SESSION_TOOLS, isCallId, type SessionStore, type SessionTool } from '@toolgate/calls';
import type { Config } from '@toolgate/config';
import type { ToolRegistry } from '@toolgate/registry';
import { Router } from 'express';
import type { SessionList } from '../api-types.js';
import { ApiError } from '../errors.js';
import { clientOf, objectBody } from '../http.js';

/** When a client at its session cap may try again: sessions end when idle or deleted. */
const SESSIONS_RETRY_SECONDS = 30;

export interface SessionRouteOptions {
  sessions: SessionStore;
  registry: ToolRegistry;
  config: Config['sessions'];
}

export function sessionRoutes({ sessions, registry, config }: SessionRouteOptions): Router {
  const router = Router();

  router.post('/v1/sessions', async (req, res) => {
    const client = clientOf(res);
    const { tool, ...rest } = objectBody(req);
    if (typeof tool !== 'string' || !SESSION_TOOLS.includes(tool as SessionTool)) {
      throw new ApiError('invalid_request', `"tool" must be one of ${SESSION_TOOLS.join(', ')}`);
    }
    const unknown = Object.keys(rest);
    if (unknown.length > 0) {
      throw new ApiError('invalid_request', `unknown field "${unknown[0]}"`);
    }
    const spec = registry.get(tool);
    if (!spec) throw new ApiError('unknown_tool', `no tool named "${tool}"`);
    if (!client.scope.allows(spec)) {
      throw new ApiError('forbidden', `client "${client.id}" may not call "${tool}"`);
    }
    const host = await sessions.pickHost();
    if (!host) {
      throw new ApiError('unavailable', 'no worker that runs sandboxes is up; try again shortly', {
        headers: { 'Retry-After': '2' },
      });
    }
    const created = await sessions.create({
      clientId: client.id,
      ...(client.user === undefined ? {} : { user: client.user }),
      tool: tool as SessionTool,
      workerId: host,
      cap: client.limits.sessions,
      ...(client.perUser.sessions === undefined ? {} : { userCap: client.perUser.sessions }),
      idleMs: config.idleSeconds * 1000,
      lifetimeMs: config.maxLifetimeSeconds * 1000,
    });
    if (!created.created && created.scope === 'user') {
      throw new ApiError(
        'too_many_sessions',
        `user "${client.user ?? ''}" of client "${client.id}" holds ${created.sessions} sessions, its limit (limits.perUser.sessions: ${client.perUser.sessions ?? 0}); delete one or let one expire`,
        {
          details: { sessions: created.sessions, limit: client.perUser.sessions, scope: 'user' },
          headers: { 'Retry-After': String(SESSIONS_RETRY_SECONDS) },
        },
      );
    }
    if (!created.created) {
      throw new ApiError(
        'too_many_sessions',
        `client "${client.id}" holds ${created.sessions} sessions, its limit (limits.sessions: ${client.limits.sessions}); delete one or let one expire`,
        {
          details: { sessions: created.sessions, limit: client.limits.sessions },
          headers: { 'Retry-After': String(SESSIONS_RETRY_SECONDS) },
        },
      );
    }
    res
      .status(201)
      .location(`/v1/sessions/${created.id}`)
      .json({ id: created.id, tool, expiresAt: new Date(created.expiresAt).toISOString() });
  });

  router.get('/v1/sessions', async (_req, res) => {
    // A user sees its own sessions; the client's API key (no user) all of the client's.
    const client = clientOf(res);
    const list = await sessions.list(client.id, client.user);
    const body: SessionList = {
      sessions: list.map((s) => ({
        id: s.id,
        tool: s.tool,
        createdAt: new Date(s.createdAt).toISOString(),
        lastUsedAt: new Date(s.lastUsedAt).toISOString(),
        expiresAt: new Date(s.expiresAt).toISOString(),
        ...(s.memoryBytes === undefined ? {} : { memoryBytes: s.memoryBytes }),
        ...(s.user === undefined ? {} : { user: s.user }),
      })),
    };
    res.json(body);
  });

  router.delete('/v1/sessions/:id', async (req, res) => {
    const id = req.params.id!;
    // Another client's session, or another user's of the same client, is as unknown as a
    // missing one; the client's API key (no user) may end any of the client's.
    const client = clientOf(res);
    const host = isCallId(id) ? await sessions.remove(id, client.id, client.user) : undefined;
    if (!host) throw new ApiError('session_not_found', `no session "${id}"`);
    res.status(204).end();
  });

  return router;
}
