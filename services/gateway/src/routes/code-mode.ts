/**
 * The gateway side of code mode (docs/code-mode.md): a worker running a script sends the
 * script's nested calls here, with the script's capability instead of a client key. Each one
 * then takes the same pipeline as a model's call, as the script's caller (its client, or the
 * token it was started with: that token's scopes and user): scope, validation,
 * rate limit, loop guard (the script's call is the conversation), precheck, approval, cache,
 * admission, idempotency, audit and stats, with `parentCallId` the script's call.
 */
import {
  Router,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
} from 'express';
import type { CallOutcome, CodeModeCapabilities, CodeModeGrant } from '@toolgate/calls';
import type { ToolRegistry } from '@toolgate/registry';
import type { OAuthResource } from '../auth/oauth.js';
import type { Client, Clients } from '../clients.js';
import type { AuthFailures } from '../policy/auth-failures.js';
import { listingScope, type CallPolicy } from '../policy/cedar.js';
import { ApiError } from '../errors.js';
import { objectBody } from '../http.js';
import type { CallPipeline } from '../pipeline.js';
import { CODE_MODE_TOOL, startsCodeMode } from '../code-mode-tools.js';

export interface CodeModeRouteOptions {
  capabilities: CodeModeCapabilities;
  clients: Clients;
  /** The pipeline of a client's shard: a nested call runs where its caller's calls do. */
  pipelineOf: (clientId: string) => CallPipeline;
  registry: ToolRegistry;
  /** `codeMode.approval`: a nested call that needs approval waits for it, or fails at once. */
  approval: 'wait' | 'fail';
  /** The gateway's body reader (its limits), run once the capability is known good. */
  body: RequestHandler;
  /** Unknown capabilities count as bad keys of their source address (`policy.authFailures`). */
  failures?: AuthFailures;
  /** Rebuilds the grant of a script started with a token (absent: no `auth.oauth`). */
  oauth?: OAuthResource;
  /** Cedar policies: the script's listing leaves out what no policy could permit. */
  policy?: CallPolicy;
}

interface Authorized {
  client: Client;
  grant: CodeModeGrant;
}

function bearer(req: Request): string {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.get('authorization') ?? '');
  return m?.[1] ?? '';
}

/**
 * Who a script's nested calls act as: the Client its own call had. A token's script gets that
 * token's grant (its scopes ∩ the client's tools, the step-up), user and groups, rebuilt the
 * way the token itself would be; an API key's script is its client. Undefined: the client is gone, or
 * the token's script reached a gateway without OAuth configured (never a wider grant).
 */
function callerOf(o: CodeModeRouteOptions, grant: CodeModeGrant): Client | undefined {
  const client = o.clients.byId(grant.clientId);
  if (!client) return undefined;
  const caller =
    grant.scopes !== undefined
      ? o.oauth?.asToken(client, grant.scopes, grant.user)
      : grant.user === undefined
        ? client
        : { ...client, user: grant.user };
  // The token's groups, as `OAuthResource.authenticate` adds them: the policies see the same.
  return caller && grant.groups !== undefined ? { ...caller, groups: grant.groups } : caller;
}

function unknownCapability(): ApiError {
  return new ApiError(
    'unauthorized',
    "unknown or expired code-mode capability (the script's call has ended)",
  );
}

/** A request with no valid capability: counted against its address like a bad key. */
async function refuse(o: CodeModeRouteOptions, req: Request): Promise<ApiError> {
  const err = unknownCapability();
  if (!o.failures) return err;
  return o.failures.fail(req.ip ?? req.socket.remoteAddress ?? 'unknown', err);
}

/**
 * A nested call of a sandboxed tool needs a running lease of its own (limits.sandboxInFlight)
 * while the script holds one until it ends: with a cap of 1, the client's or, for a user's
 * script, the user's, that lease can never be granted before the script ends, so the call
 * would wait out the script's timeout. Refused at once instead. (A script never runs in a
 * session, whose calls take no lease: a session runs run_python without code mode.)
 */
function sandboxSlotRefusal(
  client: Client,
  sandboxed: boolean,
  tool: string,
): ApiError | undefined {
  if (!sandboxed) return undefined;
  const userCap = client.user === undefined ? undefined : client.perUser.sandboxInFlight;
  const [limit, cap] =
    userCap !== undefined && userCap <= 1
      ? ['limits.perUser.sandboxInFlight', userCap]
      : ['limits.sandboxInFlight', client.limits.sandboxInFlight];
  if (cap > 1) return undefined;
  return new ApiError(
    'code_mode_sandbox_slot',
    `"${tool}" runs in a sandbox, and this script holds the only sandbox slot its caller may use (${limit}: ${cap}): the call could start only after the script ends`,
    { details: { tool, limit, value: cap } },
  );
}

export function codeModeRoutes(o: CodeModeRouteOptions): Router {
  const router = Router();

  /** The listing the script's `toolgate` module is made from: the caller's tools, code mode aside. */
  router.get('/v1/code-mode/tools', async (req, res) => {
    const grant = await o.capabilities.peek(bearer(req));
    const client = grant && callerOf(o, grant);
    if (!client) throw await refuse(o, req);
    const scope = listingScope(client, o.policy, o.registry);
    const tools = o.registry
      .list()
      .filter((t) => t.name !== CODE_MODE_TOOL && scope.allows(t))
      .map((t) => ({
        name: t.name,
        description: t.description,
        parameters: t.parameters,
        ...(t.result ? { result: t.result } : {}),
      }));
    res.json({ tools });
  });

  const authorize = (req: Request, res: Response, next: NextFunction) => {
    o.capabilities.take(bearer(req)).then((taken) => {
      if (!taken.ok) {
        if (taken.reason === 'exhausted')
          return next(
            new ApiError(
              'code_mode_max_calls',
              'this script has made all the nested calls it may (codeMode.maxCalls)',
            ),
          );
        return void refuse(o, req).then(next, next);
      }
      const client = callerOf(o, taken.grant);
      if (!client) return void refuse(o, req).then(next, next);
      res.locals.codeMode = { client, grant: taken.grant } satisfies Authorized;
      next();
    }, next);
  };

  router.post('/v1/code-mode/calls', authorize, o.body, async (req, res) => {
    const { client, grant } = res.locals.codeMode as Authorized;
    const body = objectBody(req);
    const tool = body.tool;
    const args = body.args ?? {};
    if (typeof tool !== 'string' || tool.length === 0 || tool.length > 128)
      throw new ApiError('invalid_request', '"tool" must be a tool name');
    if (startsCodeMode(tool, args))
      throw new ApiError(
        'code_mode_depth',
        `a nested call cannot start code mode ("${tool}"${tool === CODE_MODE_TOOL ? '' : ' with tools'}): code mode is one level deep`,
      );
    // Outside the caller's scope, the pipeline's 403 comes first, word for word.
    const spec = o.registry.get(tool);
    const sandboxed = spec?.sandbox !== undefined && client.scope.allows(spec);
    const slot = sandboxSlotRefusal(client, sandboxed, tool);
    if (slot) throw slot;
    const idempotencyKey = req.get('idempotency-key');
    // The worker hangs up when the script ends (cancelled, timed out, killed): its nested call
    // is cancelled with it, wherever it is (parked, queued or running).
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const pipeline = o.pipelineOf(client.id);
    const response = await pipeline.call(client, {
      tool,
      args,
      wait: true,
      signal: gone.signal,
      conversationId: grant.parentCallId,
      parentCallId: grant.parentCallId,
      ...(req.ip ? { sourceIp: req.ip } : {}),
      approval: o.approval === 'fail' ? 'refuse' : 'park',
      ...(idempotencyKey && idempotencyKey.length <= 255 ? { idempotencyKey } : {}),
    });
    let outcome: CallOutcome | undefined;
    if (response.kind === 'done') outcome = response.outcome;
    else {
      // Parked for approval (or still running past the wait): the script waits for its end.
      const id = response.id;
      const onGone = () => void pipeline.cancel(client, id).catch(() => undefined);
      gone.signal.addEventListener('abort', onGone, { once: true });
      if (gone.signal.aborted) onGone();
      try {
        await pipeline.watch(
          client,
          id,
          (event) => {
            if (event.type === 'outcome') outcome = event.outcome;
          },
          gone.signal,
        );
      } finally {
        gone.signal.removeEventListener('abort', onGone);
      }
      if (!outcome) {
        const record = await pipeline.get(client, id);
        outcome = record.outcome ?? {
          id,
          tool,
          status: 'error',
          error: {
            code: record.status,
            message: `the nested call ended ${record.status} without a result`,
          },
          durationMs: 0,
          cached: false,
        };
      }
    }
    res.json(outcome);
  });
  return router;
}
