/**
 * `POST /v1/sessions`, `GET /v1/sessions`, `DELETE /v1/sessions/{id}` (docs/sessions.md): a
 * session's record lives in Redis, its sandbox on the worker picked here; the gateway keeps
 * nothing.
 */
import {
  SESSION_TOOLS,
  isCallId,
  type AuditLog,
  type SessionRecord,
  type SessionStore,
  type SessionTool,
} from '@toolgate/calls';
import type { Config } from '@toolgate/config';
import type { ToolRegistry } from '@toolgate/registry';
import { Router, type Request } from 'express';
import type { AdminSessionList, SessionList } from '../api-types.js';
import { actorOf, type Client } from '../clients.js';
import { ApiError } from '../errors.js';
import { clientOf, objectBody, requireAdmin } from '../http.js';

/** When a client at its session cap may try again: sessions end when idle or deleted. */
const SESSIONS_RETRY_SECONDS = 30;

export interface SessionRouteOptions {
  sessions: SessionStore;
  registry: ToolRegistry;
  config: Config['sessions'];
  /** Where an admin's end of a session is recorded (absent: not recorded). */
  audit?: AuditLog;
}

/** Sessions an admin's page lists at most (GET /v1/admin/sessions?limit=, default 100). */
export const ADMIN_SESSIONS_MAX = 500;
const ADMIN_SESSIONS_DEFAULT = 100;

/** `?limit=` of GET /v1/admin/sessions, checked (`invalid_request` otherwise). */
export function adminSessionsLimit(req: Request): number {
  const raw = req.query.limit;
  if (raw === undefined) return ADMIN_SESSIONS_DEFAULT;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw) || +raw < 1 || +raw > ADMIN_SESSIONS_MAX) {
    throw new ApiError(
      'invalid_request',
      `"limit" must be an integer from 1 to ${ADMIN_SESSIONS_MAX}`,
    );
  }
  return Number(raw);
}

/** A session as GET /v1/admin/sessions lists it. */
export function adminSessionView(s: SessionRecord): AdminSessionList['sessions'][number] {
  return {
    id: s.id,
    clientId: s.clientId,
    tool: s.tool,
    workerId: s.workerId,
    createdAt: new Date(s.createdAt).toISOString(),
    lastUsedAt: new Date(s.lastUsedAt).toISOString(),
    expiresAt: new Date(s.expiresAt).toISOString(),
    ...(s.memoryBytes === undefined ? {} : { memoryBytes: s.memoryBytes }),
  };
}

/** A conversation id longer than this is refused: it becomes part of a Redis key. */
export const CONVERSATION_ID_MAX = 256;

/** The live worker a new session goes to, or 503 when no worker runs sandboxes. */
async function hostFor(sessions: SessionStore): Promise<string> {
  const host = await sessions.pickHost();
  if (!host) {
    throw new ApiError('unavailable', 'no worker that runs sandboxes is up; try again shortly', {
      headers: { 'Retry-After': '2' },
    });
  }
  return host;
}

function tooMany(client: Client, sessions: number, scope: 'client' | 'user'): ApiError {
  if (scope === 'user') {
    return new ApiError(
      'too_many_sessions',
      `user "${client.user ?? ''}" of client "${client.id}" holds ${sessions} sessions, its limit (limits.perUser.sessions: ${client.perUser.sessions ?? 0}); delete one or let one expire`,
      {
        details: { sessions, limit: client.perUser.sessions, scope: 'user' },
        headers: { 'Retry-After': String(SESSIONS_RETRY_SECONDS) },
      },
    );
  }
  return new ApiError(
    'too_many_sessions',
    `client "${client.id}" holds ${sessions} sessions, its limit (limits.sessions: ${client.limits.sessions}); delete one or let one expire`,
    {
      details: { sessions, limit: client.limits.sessions },
      headers: { 'Retry-After': String(SESSIONS_RETRY_SECONDS) },
    },
  );
}

/**
 * The bridge's sessions per conversation (docs/sessions.md#conversations): the session a
 * client's conversation has for `tool`, created by its first call that asks for one;
 * undefined for a tool outside the client's scope.
 */
export function conversationSessions({ sessions, registry, config }: SessionRouteOptions) {
  return async (
    client: Client,
    conversationId: string,
    tool: SessionTool,
  ): Promise<string | undefined> => {
    // A tool the client may not call gets its refusal from the pipeline, no session first.
    const spec = registry.get(tool);
    if (!spec || !client.scope.allows(spec)) return undefined;
    if (conversationId.length > CONVERSATION_ID_MAX) {
      throw new ApiError(
        'invalid_request',
        `X-Conversation-Id is longer than ${CONVERSATION_ID_MAX} characters`,
      );
    }
    // Most calls find their session: no host is picked for them.
    const known = await sessions.ofConversation(client.id, tool, conversationId, client.user);
    if (known) return known;
    const made = await sessions.forConversation({
      clientId: client.id,
      ...(client.user === undefined ? {} : { user: client.user }),
      conversationId,
      tool,
      workerId: await hostFor(sessions),
      cap: client.limits.sessions,
      ...(client.perUser.sessions === undefined ? {} : { userCap: client.perUser.sessions }),
      idleMs: config.idleSeconds * 1000,
      lifetimeMs: config.maxLifetimeSeconds * 1000,
    });
    if (!('id' in made)) throw tooMany(client, made.sessions, made.scope);
    return made.id;
  };
}

export function sessionRoutes({ sessions, registry, config, audit }: SessionRouteOptions): Router {
  const router = Router();
  router.use('/v1/admin/sessions', requireAdmin);

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
    const host = await hostFor(sessions);
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
    if (!created.created) throw tooMany(client, created.sessions, created.scope);
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

  /** Every client's sessions, for admins: a bounded page, oldest first. */
  router.get('/v1/admin/sessions', async (req, res) => {
    const page = await sessions.listAll(adminSessionsLimit(req));
    const body: AdminSessionList = {
      sessions: page.sessions.map(adminSessionView),
      total: page.total,
      truncated: page.truncated,
    };
    res.json(body);
  });

  /** Stop any client's session (its sandbox killed at once), recorded in its client's audit. */
  router.delete('/v1/admin/sessions/:id', async (req, res) => {
    const id = req.params.id!;
    const session = isCallId(id) ? await sessions.get(id) : undefined;
    const host = session ? await sessions.remove(id) : undefined;
    if (!session || !host) throw new ApiError('session_not_found', `no session "${id}"`);
    await audit
      ?.append(
        audit.entry({
          event: 'session',
          client: session.clientId,
          ...(session.user === undefined ? {} : { user: session.user }),
          tool: session.tool,
          status: 'ended',
          reason: `session ${id} ended by an admin`,
          by: actorOf(clientOf(res)),
        }),
      )
      .catch(() => undefined);
    res.status(204).end();
  });

  return router;
}
