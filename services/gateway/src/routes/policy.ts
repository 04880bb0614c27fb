/** Tools for policy authors (docs/policy.md): why a tool is listed, what a call would get. */
import type { BudgetUse, PolicyAction } from '@toolgate/policy';
import type { ToolRegistry } from '@toolgate/registry';
import { Router } from 'express';
import type { PolicySetView } from '../api-types.js';
import type { Client } from '../clients.js';
import { ApiError } from '../errors.js';
import { clientOf, objectBody, requireAdmin } from '../http.js';
import type { CallPolicy, PolicyCallContext } from '../policy/cedar.js';

export interface PolicyRouteOptions {
  registry: ToolRegistry;
  policy: CallPolicy | undefined;
}

const NAME_MAX = 256;
/** `GET /v1/policy` lists at most this many policies of a set… */
export const MAX_LISTED = 2_000;
/** …each text cut at this many characters (4 KiB). */
export const MAX_TEXT_CHARS = 4_096;

function text(v: unknown, field: string, required = false): string | undefined {
  if (v === undefined && !required) return undefined;
  if (typeof v !== 'string' || v.length === 0 || v.length > NAME_MAX)
    throw new ApiError(
      'invalid_request',
      `"${field}" must be a string of 1 to ${NAME_MAX} characters`,
    );
  return v;
}

function record(v: unknown, field: string): Record<string, unknown> | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new ApiError('invalid_request', `"${field}" must be an object`);
  return v as Record<string, unknown>;
}

export function policyRoutes(o: PolicyRouteOptions): Router {
  const router = Router();
  const noPolicies = () =>
    new ApiError('not_found', 'no Cedar policies are configured here (policy.cedar)');

  /**
   * Admins: the active set and its policies, bounded (at most MAX_LISTED policies, each text cut
   * at MAX_TEXT_CHARS). A refused reload shows as a fixed sentence: Cedar's messages quote the
   * files, and `toolgate policy check` or the log says the rest.
   */
  router.get('/v1/policy', requireAdmin, (_req, res) => {
    if (!o.policy) throw noPolicies();
    const engine = o.policy.engine;
    const state = engine.state();
    const all = engine.list();
    const body: PolicySetView = {
      hash: state.hash,
      loadedAt: new Date(state.loadedAt).toISOString(),
      count: state.policies,
      ...(state.lastError === undefined
        ? {}
        : {
            lastError:
              'the policy files on disk are invalid and were not loaded; the set above keeps deciding (toolgate policy check, or the gateway log, says why)',
          }),
      policies: all.slice(0, MAX_LISTED).map((p) => ({
        id: p.id,
        effect: p.effect,
        file: p.file,
        annotations: p.annotations,
        text: p.text.length > MAX_TEXT_CHARS ? p.text.slice(0, MAX_TEXT_CHARS) : p.text,
        ...(p.text.length > MAX_TEXT_CHARS ? { truncated: true } : {}),
      })),
      ...(all.length > MAX_LISTED ? { truncated: true } : {}),
    };
    res.json(body);
  });

  /** For the caller: whether its listings show the tool, and which policies decide that. */
  router.get('/v1/policy/explain', (req, res) => {
    const name = text(req.query.tool, 'tool', true)!;
    const client = clientOf(res);
    const tool = o.registry.get(name);
    // A tool outside the caller's scope is as unknown as a missing one.
    if (!tool || !client.scope.allows(tool))
      throw new ApiError('unknown_tool', `no tool named "${name}"`);
    if (!o.policy) {
      res.json({
        tool: name,
        listed: true,
        policies: [],
        reason: 'no Cedar policies are configured',
      });
      return;
    }
    const why = o.policy.listable(client, tool);
    res.json({ tool: name, ...why, hash: o.policy.engine.state().hash });
  });

  /** Admins: the decision a call (or an approval) would get, with the active set. */
  router.post('/v1/policy/check', requireAdmin, async (req, res) => {
    if (!o.policy) throw noPolicies();
    const body = objectBody(req);
    const p = record(body.principal, 'principal');
    if (!p)
      throw new ApiError('invalid_request', '"principal" is required: {client, user?, groups?}');
    const groups = p.groups;
    if (
      groups !== undefined &&
      (!Array.isArray(groups) ||
        groups.length > 256 ||
        !groups.every((g) => typeof g === 'string' && g.length > 0))
    )
      throw new ApiError(
        'invalid_request',
        '"principal.groups" must be a list of at most 256 names',
      );
    const user = text(p.user, 'principal.user');
    const principal = {
      id: text(p.client, 'principal.client', true)!,
      ...(user === undefined ? {} : { user }),
      ...(groups === undefined ? {} : { groups: groups as string[] }),
    } as Client;
    const action = (body.action ?? 'call') as PolicyAction;
    if (action !== 'call' && action !== 'approve')
      throw new ApiError('invalid_request', '"action" must be "call" or "approve"');
    const name = text(body.tool, 'tool', true)!;
    const tool = o.registry.get(name);
    if (!tool) throw new ApiError('unknown_tool', `no tool named "${name}"`);
    const checked = o.registry.validate(name, record(body.args, 'args') ?? {});
    if (!checked.ok) throw ApiError.invalidArguments(name, checked.issues);
    const c = record(body.context, 'context') ?? {};
    const codeMode = record(c.codeMode, 'context.codeMode');
    const conversationId = text(c.conversationId, 'context.conversationId');
    const sourceIp = text(c.sourceIp, 'context.sourceIp');
    const session = text(c.session, 'context.session');
    const parentTool = codeMode && text(codeMode.parentTool, 'context.codeMode.parentTool', true);
    const at: PolicyCallContext = {
      ...(conversationId === undefined ? {} : { conversationId }),
      ...(sourceIp === undefined ? {} : { sourceIp }),
      ...(session === undefined ? {} : { session }),
      ...(parentTool === undefined ? {} : { codeMode: { parentTool } }),
    };
    const budget = record(c.budget, 'context.budget');
    for (const [kind, use] of Object.entries(budget ?? {})) {
      const u = use as { used?: unknown; limit?: unknown } | null;
      if (typeof u?.used !== 'number' || typeof u.limit !== 'number')
        throw new ApiError(
          'invalid_request',
          `"context.budget.${kind}" must be {used, limit} (numbers)`,
        );
    }
    const decision = await o.policy.decide(
      action,
      principal,
      tool,
      checked.args,
      at,
      budget as Record<string, BudgetUse> | undefined,
    );
    res.json({ ...decision, hash: o.policy.engine.state().hash });
  });
  return router;
}
