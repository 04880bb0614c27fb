import { randomUUID } from 'node:crypto';
import {
  FINAL_STATUSES,
  briefOf,
  cancelledOutcome,
  canonicalDigest,
  isCallId,
  finishedRecord,
  outcomeEvent,
  publishOutcome,
  redact,
  isConnectionLost,
  isRedisDown,
  liveWorkers,
  principal,
  budgetRemaining,
  exhaustedBudget,
  type Admission,
  type Approvals,
  type AuditLog,
  type BudgetMetric,
  type Budgets,
  type CallBrief,
  type CallEvent,
  type CallEvents,
  type CallIndex,
  type CallJob,
  type CallOutcome,
  type CallRecord,
  type CallStore,
  type Dispatcher,
  type Keys,
  type PolicyVerdict,
  type QueueKind,
  type ResultCache,
  type SessionStore,
  type Stats,
  type StatsBatch,
} from '@toolgate/calls';
import { runPrecheck, type Tool, type ToolRegistry, type ToolServices } from '@toolgate/registry';
import { injectContext, withSpan } from '@toolgate/telemetry';
import type { RedisClient, Replication, ReplicaWait } from '@toolgate/calls';
import type { ApprovalFeed } from './approval-feed.js';
import { outOfScope } from './auth/oauth.js';
import { startsCodeMode } from './code-mode-tools.js';
import { actorOf, type Client } from './clients.js';
import { pendingApproval } from './views.js';
import { ApiError } from './errors.js';
import { OutcomePolls } from './outcome-polls.js';
import type { GatewayMetrics } from './metrics.js';
import type { CallLimits, Prepaid } from './policy/limits.js';
import { CallPolicy } from './policy/cedar.js';

/** Where a call's policy decision is told: the call's trace span. */
interface DecisionSink {
  setAttribute(key: string, value: string | string[]): unknown;
}

export interface CallListQuery {
  client?: string;
  /** One user's calls (a caller signed in as a user always lists only its own). */
  user?: string;
  tool?: string;
  status?: CallRecord['status'];
  /** Epoch ms. */
  since: number;
  limit: number;
}

/** Index entries read for a filtered call list (the filters apply after reading). */
export const LIST_SCAN = 1000;
/**
 * Bytes of briefs one listing reads before it stops: LIST_SCAN short briefs fit (≤ 1 KiB
 * each), parked calls' briefs (≤ BRIEF_MAX_BYTES with their argument preview) stop it sooner.
 */
export const LIST_BYTES = 1024 * 1024;
/** Briefs read per round trip: the scan stops between chunks. */
const LIST_CHUNK = 100;
/** Bytes of records written before briefs existed one listing may read to make their briefs. */
export const LIST_LEGACY_BYTES = 1024 * 1024;

export interface CallRequest {
  tool: string;
  args: unknown;
  /** false: answer at once with the queued call (202). */
  wait: boolean;
  idempotencyKey?: string;
  conversationId?: string;
  /** What the request already paid at the door (`chargeRequests`); absent: the call pays. */
  prepaid?: Prepaid;
  /** The call's live events (status, output, progress, outcome) while the request waits. */
  onEvent?: (event: CallEvent) => void;
  /** Aborting cancels the call if it has not finished (a client that went away). */
  signal?: AbortSignal;
  /**
   * Called at admission with the caller's tightest budget left (`Toolgate-Budget-Remaining`),
   * when it has a budget (docs/budgets.md).
   */
  onBudget?: (remaining: string) => void;
  /** Called with the call's id once it is queued, while the request still waits (MCP's cancel map). */
  onAccepted?: (id: string) => void;
  /** The session to run in (`X-Toolgate-Session`, MCP `_meta`; docs/sessions.md). */
  session?: string;
  /** The address the request came from (`context.sourceIp` of Cedar policies). */
  sourceIp?: string;
  /** A nested call of a code-mode script: the script's call (audit, records; docs/code-mode.md). */
  parentCallId?: string;
  /**
   * What a call that needs approval does: `park` (the default) waits for a decision;
   * `refuse` answers 403 `approval_required` without parking (`codeMode.approval: fail`).
   */
  approval?: 'park' | 'refuse';
}

/** A finished call (200), or an accepted one still in flight or parked (202). */
export type CallResponse =
  | { kind: 'done'; outcome: CallOutcome }
  | { kind: 'accepted'; id: string; status: CallRecord['status'] };

export interface PipelineOptions {
  redis: RedisClient;
  keys: Keys;
  store: CallStore;
  dispatcher: Dispatcher;
  registry: ToolRegistry;
  limits: CallLimits;
  /** Per-client calls in flight and the fair queue order (docs/scheduling.md). */
  admission: Admission;
  /** Spend budgets per client and user, checked at admission (docs/budgets.md). */
  budgets: Budgets;
  approvals: Approvals;
  /** Live events of calls (GET /v1/calls/{id}/events, MCP progress). */
  events: CallEvents;
  /** Each client's recent calls (GET /v1/calls). */
  index: CallIndex;
  /** The configured clients (an admin's call list reads all of them). */
  clientIds: readonly string[];
  /** Approval changes for the console's live list. */
  feed: ApprovalFeed;
  audit: AuditLog;
  cache: ResultCache;
  stats: Stats;
  /** Stats of the calls this gateway answers itself, batched. */
  statsBatch: StatsBatch;
  metrics: GatewayMetrics;
  /** `redis.durability`: an accepted call is on that many replicas before it is answered. */
  replicas: ReplicaWait;
  /** Warns of calls accepted on the master only (WAIT timed out), at most every few seconds. */
  onUnreplicated: (replication: Replication) => void;
  requiresApproval: (tool: Tool) => boolean;
  /**
   * What tools' prechecks see on the gateway: the policy settings only (`shellPolicy`); the
   * gateway never runs a tool, so no sandbox, HTTP client or store.
   */
  services: Partial<ToolServices>;
  syncWaitGraceMs: number;
  /** Sessions (docs/sessions.md): a session's calls go to its worker's own queue. */
  sessions: SessionStore;
  /**
   * An upstream tool held back under `trust: pin` (pending or quarantined, docs/upstreams.md):
   * a call to it is answered `tool_quarantined`, not `unknown_tool`.
   */
  heldTool?: (name: string) => { upstream: string; tool: string; status: string } | undefined;
  /** Cedar policies (`policy.cedar`, docs/policy.md): an AND on top of the lists. */
  policy?: CallPolicy;
}

const LIVENESS_CACHE_MS = 1000;
/**
 * Tools whose calls spend `egressBytes` (their bytes are measured: services/worker usage.ts),
 * besides every tool whose sandbox reaches the network (its egress proxy's bytes).
 */
const EGRESS_TOOLS = new Set(['http_get', 'http_post']);
const UNAVAILABLE = 'Redis is unavailable; the call was not accepted';
/** When a client over its calls in flight may try again: calls end at no predictable time. */
const IN_FLIGHT_RETRY_SECONDS = 2;
/** When a client at its pending-approval limit may try again: decisions take a person. */
const PENDING_RETRY_SECONDS = 30;
/** How long a cancel waits for the worker to stop a running call before answering 202. */
const CANCEL_WAIT_MS = 5000;
/** How long a cancelled call's marker lives, for a worker that missed the cancel message. */
const CANCEL_MARK_SECONDS = 3600;
/** How often a watcher re-reads a call's record, in case its outcome message was lost. */
const WATCH_POLL_MS = 2000;

/**
 * One path for every call, whatever the dialect (docs/spec.md §6): rate limit and loop guard →
 * tool and scope → schema → the tool's precheck → approval → cache → admission (calls in
 * flight) → enqueue → wait. Throws ApiError for problems with the request itself; tool
 * failures are outcomes.
 */
export class CallPipeline {
  private workersSeenAt = 0;
  /** Re-reads of watched calls, one per call on this gateway (not one per watcher). */
  readonly polls = new OutcomePolls((id) => this.o.dispatcher.lookup(id));

  constructor(private readonly o: PipelineOptions) {}

  async call(client: Client, req: CallRequest): Promise<CallResponse> {
    return withSpan(
      'toolgate.call',
      {
        attributes: {
          'toolgate.tool': req.tool,
          'toolgate.client': client.id,
          ...(client.user === undefined ? {} : { 'toolgate.user': client.user }),
        },
      },
      async (span) => {
        const response = await this.measured(client, req, span);
        span.setAttribute(
          'toolgate.status',
          response.kind === 'done' ? response.outcome.status : response.status,
        );
        return response;
      },
    );
  }

  private async measured(
    client: Client,
    req: CallRequest,
    span: DecisionSink,
  ): Promise<CallResponse> {
    const started = performance.now();
    try {
      const response = await this.run(client, req, span);
      if (response.kind === 'done') {
        this.o.metrics.calls.inc({
          tool: req.tool,
          client: client.id,
          status: response.outcome.status,
        });
        this.o.metrics.callDuration.observe(
          { tool: req.tool },
          (performance.now() - started) / 1000,
        );
      } else {
        this.o.metrics.calls.inc({ tool: req.tool, client: client.id, status: response.status });
      }
      return response;
    } catch (err) {
      if (err instanceof ApiError) {
        this.o.metrics.calls.inc({
          tool: this.o.registry.get(req.tool) ? req.tool : '(unknown)',
          client: client.id,
          status: err.code,
        });
        if (err.code !== 'unavailable' && this.o.limits.firstRefusal(client, err))
          this.auditRefusal(client, req, err);
      }
      throw err;
    }
  }

  private async run(client: Client, req: CallRequest, span: DecisionSink): Promise<CallResponse> {
    return guardRedis(async () => {
      // Every call costs one from the client's rate, refused or not; a request's first call
      // was paid at the door.
      await this.o.limits.consume(client, 1, req.conversationId, req.prepaid);
      const tool = this.o.registry.get(req.tool);
      if (!tool) {
        const held = this.o.heldTool?.(req.tool);
        // Said only to a client whose scope has the name: the others learn nothing of it.
        if (held && client.scope.allows({ name: req.tool, category: `upstream:${held.upstream}` }))
          throw new ApiError(
            'tool_quarantined',
            held.status === 'quarantined'
              ? `"${req.tool}" is quarantined: upstream "${held.upstream}" changed its definition and an admin has not approved the change`
              : `"${req.tool}" waits for an admin to approve its definition (upstream "${held.upstream}")`,
            { details: { upstream: held.upstream, tool: held.tool, status: held.status } },
          );
        throw new ApiError('unknown_tool', `no tool named "${req.tool}"`);
      }
      if (!client.scope.allows(tool)) throw outOfScope(client, tool);
      if (typeof req.args !== 'object' || req.args === null || Array.isArray(req.args)) {
        throw new ApiError('invalid_json', 'the arguments must be a JSON object');
      }
      const checked = this.o.registry.validate(tool.name, req.args);
      if (!checked.ok) throw ApiError.invalidArguments(tool.name, checked.issues);
      const args = checked.args;
      // The deployment's Cedar policies, on the validated arguments: a deny is a refusal, an
      // approval parks the call like `policy.approval.tools` (docs/policy.md).
      let verdict: PolicyVerdict | undefined;
      if (this.o.policy) {
        const decision = await this.o.policy.decide('call', client, tool, args, {
          ...(req.conversationId === undefined ? {} : { conversationId: req.conversationId }),
          ...(req.sourceIp === undefined ? {} : { sourceIp: req.sourceIp }),
          ...(req.session === undefined ? {} : { session: req.session }),
          ...(req.parentCallId === undefined
            ? {}
            : { codeMode: { parentTool: await this.parentTool(req.parentCallId) } }),
        });
        verdict = { decision: decision.decision, policies: decision.policies };
        span.setAttribute('toolgate.policy.decision', decision.decision);
        span.setAttribute('toolgate.policy.ids', decision.policies);
        if (decision.decision === 'deny') throw CallPolicy.denied(decision);
      }
      await this.checkBudget(client, tool, req);
      // The tool's own policy on these arguments (its declared precheck): a refusal is an
      // outcome the model reads, not an HTTP error.
      const denied = runPrecheck(tool, args, { clientId: client.id, services: this.o.services });
      if (denied) {
        const error = {
          code: denied.code,
          message: denied.message,
          ...(denied.details === undefined ? {} : { details: denied.details }),
        };
        return {
          kind: 'done',
          outcome: await this.answer(
            tool,
            client,
            args,
            { status: 'error', error },
            'tool policy',
            req.parentCallId,
            verdict,
          ),
        };
      }
      const needsApproval = this.o.requiresApproval(tool) || verdict?.decision === 'approval';
      if (needsApproval && req.approval === 'refuse') {
        throw new ApiError(
          'approval_required',
          `"${tool.name}" needs an administrator's approval, and nested calls of this deployment do not wait for one (codeMode.approval: fail)`,
        );
      }
      let host: string | undefined;
      if (req.session !== undefined) {
        if (needsApproval) {
          throw new ApiError(
            'invalid_request',
            `"${tool.name}" needs approval here, and calls that need approval cannot run in a session`,
          );
        }
        const found = await this.sessionHost(client, tool, req.session);
        if ('lost' in found) {
          return {
            kind: 'done',
            outcome: await this.answer(
              tool,
              client,
              args,
              { status: 'error', error: found.lost },
              'session lost',
              req.parentCallId,
              verdict,
            ),
          };
        }
        host = found.host;
      }

      // A session's call depends on the session's state: never answered from the cache.
      if (!needsApproval && tool.cacheTtlSeconds > 0 && host === undefined) {
        // A client-scoped result is its user's own under `isolation: user` (see CallJob.space).
        const hit = await this.o.cache.get(tool, args, spaceFor(client));
        if (hit) {
          this.o.metrics.cache.inc({ tool: tool.name, result: 'hit' });
          return {
            kind: 'done',
            outcome: await this.answer(
              tool,
              client,
              args,
              { status: 'ok', result: hit.result, cached: true },
              'cache hit',
              req.parentCallId,
              verdict,
            ),
          };
        }
      }

      await this.requireWorkers();
      if (req.wait && !needsApproval && !(await this.o.dispatcher.ready(2000))) {
        throw redisUnavailable(this.o.redis);
      }
      const id = randomUUID();
      if (req.idempotencyKey) {
        // Bound to the request: the same key with another tool or other arguments is refused
        // rather than answered with another call's result (docs/http-api.md, idempotency).
        const fingerprint = canonicalDigest({ tool: tool.name, args });
        // A user's keys are its own: another user of the client reusing one gets a call of its own.
        const holder = await this.o.store.claimIdempotencyKey(
          principal(client.id, client.user),
          req.idempotencyKey,
          id,
          fingerprint,
        );
        if (holder && !holder.sameRequest) {
          throw new ApiError(
            'idempotency_mismatch',
            'this idempotency key was already used for a different request (another tool or other arguments); use a new key',
            { details: { callId: holder.id } },
          );
        }
        if (holder) return this.existing(holder.id, req.wait, tool.timeoutMs);
      }
      const kind: QueueKind = tool.sandbox ? 'sandbox' : 'fast';
      const job: CallJob = {
        id,
        tool: tool.name,
        args,
        clientId: client.id,
        ...(client.user === undefined ? {} : { user: client.user }),
        ...(spaceFor(client) === client.id ? {} : { space: spaceFor(client) }),
        acceptedAt: Date.now(),
        ...(req.conversationId ? { conversationId: req.conversationId } : {}),
        ...(req.wait ? { replyTo: this.o.dispatcher.replyChannel } : {}),
        ...(host !== undefined ? { session: { id: req.session!, host } } : {}),
        ...(req.parentCallId ? { parentCallId: req.parentCallId } : {}),
        ...(verdict ? { policy: verdict } : {}),
        // A script started with a token: its nested calls get the token's grant, not the client's.
        ...(client.grant && startsCodeMode(tool.name, args)
          ? { scopes: client.grant.configured() }
          : {}),
        // And its groups: a policy on `principal in Toolgate::Group::…` sees them in the script.
        ...(client.groups !== undefined && startsCodeMode(tool.name, args)
          ? { groups: [...client.groups] }
          : {}),
      };
      const trace = injectContext();
      if (trace) job.trace = trace;
      let outcome: Promise<CallOutcome | undefined> | undefined;
      let stopEvents: (() => void) | undefined;
      let parked: CallRecord | undefined;
      try {
        if (needsApproval) {
          const park = await this.o.approvals.park(job, kind, client.limits.pendingApprovals);
          if ('refused' in park) throw this.tooManyPending(client, park.refused);
          parked = park.parked;
          this.o.metrics.approvalsParked.inc({ tool: tool.name });
          const multi = this.o.redis.multi();
          this.o.index.addTo(multi, client.id, [id]);
          await multi.exec();
        } else {
          // Admission (a script) and the BullMQ add; waiting and watching before them, so no
          // reply or event of the call is missed.
          outcome = req.wait
            ? this.o.dispatcher.expect(id, tool.timeoutMs + this.o.syncWaitGraceMs)
            : undefined;
          try {
            if (req.wait && req.onEvent)
              stopEvents = await this.o.events.subscribe(id, req.onEvent);
            const admitted = await this.o.dispatcher.enqueue(
              job,
              kind,
              client.limits.queued,
              this.o.admission.staleAfterMs,
              client.perUser.queued,
              host,
            );
            if (!admitted.admitted) throw this.tooManyInFlight(client, admitted);
          } catch (err) {
            stopEvents?.();
            this.o.dispatcher.forget(id);
            throw err;
          }
        }
      } catch (err) {
        // Not accepted: free the idempotency key so a retry can run the call.
        if (req.idempotencyKey) {
          await this.o.store
            .releaseIdempotencyKey(principal(client.id, client.user), req.idempotencyKey, id)
            .catch(() => undefined);
        }
        throw err;
      }
      // Accepted (parked or queued): from here on the idempotency key stays with the call.
      try {
        await this.replicated(id);
      } catch (err) {
        stopEvents?.();
        throw err;
      }
      if (parked) {
        this.o.feed
          .publish({ type: 'parked', approval: pendingApproval(briefOf(parked)) })
          .catch(() => undefined);
        return { kind: 'accepted', id, status: 'pending_approval' };
      }
      if (!outcome) return { kind: 'accepted', id, status: 'queued' };
      req.onAccepted?.(id);
      // A client that went away cancels what it was waiting for; the cancelled outcome then
      // ends the wait like any other.
      const onAbort = () => {
        this.cancelCall(id, client.id).catch(() => undefined);
      };
      req.signal?.addEventListener('abort', onAbort, { once: true });
      if (req.signal?.aborted) onAbort();
      const stopWatch = host === undefined ? undefined : this.watchHost(host);
      try {
        const done = await outcome;
        return done ? { kind: 'done', outcome: done } : { kind: 'accepted', id, status: 'running' };
      } finally {
        stopWatch?.();
        req.signal?.removeEventListener('abort', onAbort);
        stopEvents?.();
      }
    }, this.o.redis);
  }

  /**
   * The worker a session's call goes to, or the `session_lost` error the call answers (its
   * worker stopped: what it left is reaped here, so a caller never waits for a dead worker).
   * A session that does not exist, or is another client's or another user's (the client's
   * API key's sessions and each user's are apart too: each runs in its own workspace under
   * `isolation: user`), is a 404.
   */
  private async sessionHost(
    client: Client,
    tool: Tool,
    id: string,
  ): Promise<{ host: string } | { lost: { code: string; message: string } }> {
    const record = isCallId(id) ? await this.o.sessions.get(id) : undefined;
    if (!record || record.clientId !== client.id || record.user !== client.user) {
      throw new ApiError(
        'session_not_found',
        `no session "${id}": it expired, was deleted or never existed; start one with POST /v1/sessions`,
      );
    }
    if (record.tool !== tool.name) {
      throw new ApiError(
        'invalid_request',
        `session "${id}" runs ${record.tool}; call ${record.tool} in it, not ${tool.name}`,
      );
    }
    if (record.lost || !(await this.o.sessions.alive(record.workerId))) {
      if (!record.lost) await this.o.sessions.reapHost(record.workerId);
      await this.o.sessions.remove(id);
      return {
        lost: {
          code: 'session_lost',
          message: `session "${id}" is gone: the worker hosting it stopped; start a new session`,
        },
      };
    }
    return { host: record.workerId };
  }

  /**
   * While a session's call is waited for: if its worker stops beating, its calls are ended
   * `session_lost` (this wait's among them) rather than left until the tool's timeout.
   */
  private watchHost(host: string): () => void {
    const { sessions } = this.o;
    let busy = false;
    const timer = setInterval(
      () => {
        if (busy) return;
        busy = true;
        sessions
          .alive(host)
          .then((alive) => (alive ? undefined : sessions.reapHost(host)))
          .catch(() => undefined)
          .finally(() => (busy = false));
      },
      Math.max(250, Math.round(sessions.aliveMs / 2)),
    );
    return () => clearInterval(timer);
  }

  /**
   * Cancels a call the client may see (its own; admins any): a parked or queued call never
   * runs, a running one is stopped by its worker (sandbox killed). Returns the call's record:
   * `cancelled`, or still `running` if its worker did not confirm within CANCEL_WAIT_MS.
   * A call that already ended, or ends meanwhile with an outcome of its own, is a 409 conflict.
   */
  async cancel(client: Client, id: string): Promise<CallRecord> {
    const record = await this.get(client, id);
    if (FINAL_STATUSES.has(record.status)) throw alreadyEnded(record);
    return guardRedis(() => this.cancelCall(id, actorOf(client), record), this.o.redis);
  }

  private async cancelCall(id: string, by: string, seen?: CallRecord): Promise<CallRecord> {
    let record = seen ?? (await this.o.dispatcher.lookup(id));
    if (!record) throw new ApiError('not_found', `no call with id "${id}"`);
    if (record.status === 'pending_approval') {
      const cancelled = await this.o.approvals.cancel(id, by);
      if (cancelled) {
        await this.ended(cancelled, { by, stage: 'parked' });
        return cancelled;
      }
      // Decided or expired meanwhile: cancel whatever it is now.
      record = await this.o.dispatcher.lookup(id);
      if (!record || FINAL_STATUSES.has(record.status)) throw alreadyEnded(record ?? seen!);
    }
    // Workers first: a job that starts from now on ends cancelled without running, and the
    // one running it now is stopped.
    await this.o.redis
      .multi()
      .set(this.o.keys.cancelled(id), by, 'EX', CANCEL_MARK_SECONDS)
      .publish(this.o.keys.cancels, JSON.stringify({ id, by }))
      .exec();
    const taken = await this.o.dispatcher.removeWaiting(id);
    if (taken) {
      const { job, kind } = taken;
      const outcome = cancelledOutcome(job, by);
      const cancelled = finishedRecord({ ...job, redactedArgs: redact(job.args) }, kind, outcome);
      const multi = this.o.redis.multi();
      this.o.store.addTo(multi, cancelled);
      this.o.admission.releaseIn(multi, job.clientId, kind, id, job.user);
      this.o.stats.addTo(multi, outcome, job.clientId, job.user);
      if (job.replyTo) multi.publish(job.replyTo, JSON.stringify(outcome));
      await multi.exec();
      await this.ended(cancelled, { by, stage: 'queued' });
      return cancelled;
    }
    // Running (or finishing): its worker stops it and records the outcome. The worker
    // publishes the outcome before its batched record write lands: answer from the outcome.
    const outcome = await this.waitForEnd(id, CANCEL_WAIT_MS);
    const now = (await this.o.dispatcher.lookup(id)) ?? record;
    const ended: CallRecord | undefined = now.outcome
      ? now
      : outcome && {
          ...now,
          ...finishedRecord({ ...now, acceptedAt: now.createdAt }, now.queue, outcome),
        };
    if (!ended) return now;
    // The worker decides a call's outcome once, and its message and its record carry the same
    // one, so the answer does not depend on which of them this gateway saw first: a call the
    // cancel did not stop (it had ended, or ended on its own meanwhile) is a conflict.
    if (ended.status !== 'cancelled') throw alreadyEnded(ended);
    return ended;
  }

  /**
   * Tells whoever watches a call that it ended without a worker (cancelled before it ran,
   * rejected, expired): its outcome event; and audits a cancel.
   */
  async ended(
    record: CallRecord,
    cancel?: { by: string; stage: 'parked' | 'queued' },
  ): Promise<void> {
    if (!record.outcome) return;
    const multi = this.o.redis.multi();
    publishOutcome(multi, this.o.keys, outcomeEvent(record.outcome));
    if (cancel) {
      this.o.metrics.calls.inc({ tool: record.tool, client: record.clientId, status: 'cancelled' });
      this.o.audit.addTo(
        multi,
        this.o.audit.entry({
          event: 'cancel',
          client: record.clientId,
          ...(record.user === undefined ? {} : { user: record.user }),
          tool: record.tool,
          callId: record.id,
          status: 'cancelled',
          by: cancel.by,
          reason: `cancelled before it ran (${cancel.stage})`,
        }),
      );
    }
    await multi.exec();
    // The console's approvals list: an expired or cancelled parked call leaves it.
    if (record.status === 'expired') {
      await this.o.feed
        .publish({ type: 'expired', id: record.id, client: record.clientId })
        .catch(() => undefined);
    } else if (cancel?.stage === 'parked') {
      await this.o.feed
        .publish({ type: 'cancelled', id: record.id, client: record.clientId, by: cancel.by })
        .catch(() => undefined);
    }
  }

  /**
   * Streams a call's events to `onEvent`: its current status, the backlog of a running call,
   * then live events, ending with the outcome (resolves after delivering it, or when `signal`
   * aborts). Works on any gateway: events come through Redis.
   */
  async watch(
    client: Client,
    id: string,
    onEvent: (event: CallEvent) => void,
    signal?: AbortSignal,
    /** Events up to this one were seen already (an SSE client's Last-Event-ID). */
    afterSeq = 0,
  ): Promise<void> {
    const record = await this.get(client, id);
    await guardRedis(
      () => this.follow(id, onEvent, { signal, afterSeq, seen: record, pollMs: WATCH_POLL_MS }),
      this.o.redis,
    );
  }

  /** Resolves when the call has an outcome, or after `timeoutMs`. */
  /** The call's outcome once it has one, or undefined after `timeoutMs`. */
  private async waitForEnd(id: string, timeoutMs: number): Promise<CallOutcome | undefined> {
    let outcome: CallOutcome | undefined;
    await this.follow(
      id,
      (event) => {
        if (event.type === 'outcome') outcome = event.outcome;
      },
      { signal: AbortSignal.timeout(timeoutMs), pollMs: 250 },
    );
    return outcome;
  }

  /**
   * Follows a call: subscribes to its live events first (buffered), then reads its state and
   * backlog, then delivers the buffered and live events in order, each once (by `seq`); the
   * outcome last. Re-reads the record every `pollMs` in case the outcome message was lost.
   */
  private async follow(
    id: string,
    onEvent: (event: CallEvent) => void,
    o: { signal?: AbortSignal; afterSeq?: number; seen?: CallRecord; pollMs: number },
  ): Promise<void> {
    let lastSeq = o.afterSeq ?? 0;
    let finished = false;
    let resolveEnd!: () => void;
    const end = new Promise<void>((resolve) => (resolveEnd = resolve));
    const deliver = (event: CallEvent) => {
      if (finished) return;
      if (event.type === 'outcome') {
        finished = true;
        onEvent(event);
        resolveEnd();
        return;
      }
      if (event.seq <= lastSeq) return;
      lastSeq = event.seq;
      onEvent(event);
    };
    const live: CallEvent[] = [];
    let replaying = true;
    const stop = await this.o.events.subscribe(id, (e) => (replaying ? live.push(e) : deliver(e)));
    let stopPoll: (() => void) | undefined;
    const onAbort = () => resolveEnd();
    o.signal?.addEventListener('abort', onAbort, { once: true });
    // Aborted before it began (a client already gone): the listener above never fires.
    if (o.signal?.aborted) resolveEnd();
    try {
      const now = (await this.o.dispatcher.lookup(id)) ?? o.seen;
      if (now) onEvent({ type: 'status', status: now.status, seq: 0, at: Date.now() });
      if (now?.outcome) deliver(outcomeEvent(now.outcome));
      else for (const event of await this.o.events.backlog(id)) deliver(event);
      replaying = false;
      for (const event of live.sort((a, b) => a.seq - b.seq)) deliver(event);
      if (!finished && !o.signal?.aborted) {
        stopPoll = this.polls.watch(id, o.pollMs, (outcome) => deliver(outcomeEvent(outcome)));
      }
      await end;
    } finally {
      stopPoll?.();
      o.signal?.removeEventListener('abort', onAbort);
      stop();
    }
  }

  /**
   * Recent calls the client may see, newest first: its own (admins: everyone's, or one
   * client's). Reads briefs, never records: finished and parked calls from the call index,
   * calls in flight from the admission sets (their state from the queue, without arguments).
   * The scan stops at LIST_SCAN calls or LIST_BYTES of briefs, whatever the filters match;
   * `partial` says it stopped with calls left unread. Each chunk of LIST_CHUNK calls after the
   * first costs one of the client's rate.
   */
  async list(client: Client, q: CallListQuery): Promise<{ calls: CallBrief[]; partial: boolean }> {
    if (q.client !== undefined && q.client !== client.id && !client.admin) {
      throw new ApiError('forbidden', `client "${client.id}" may only list its own calls`);
    }
    const bound = client.admin ? undefined : client.user;
    if (q.user !== undefined && bound !== undefined && q.user !== bound) {
      throw new ApiError('forbidden', 'a user may only list its own calls');
    }
    // Signed in as a user: that user's calls only, asked or not (admins: any).
    const user = bound ?? q.user;
    const clients = client.admin ? (q.client ? [q.client] : this.o.clientIds) : [client.id];
    return guardRedis(async () => {
      // Filters apply after reading: read a generous page, bounded whatever the filters.
      const scan = q.tool || q.status || user !== undefined ? LIST_SCAN : q.limit;
      // One id more than the scan reads, to know whether it left calls unread (`partial`).
      const { finished, inFlight, owner } = await this.o.index.recent(
        clients,
        q.since,
        scan + 1,
        q.limit,
      );
      const found = [...new Set([...inFlight, ...finished])];
      const ids = found.slice(0, LIST_SCAN);
      const calls: CallBrief[] = [];
      const legacy = { bytes: LIST_LEGACY_BYTES };
      let bytes = 0;
      let read = 0;
      while (read < ids.length && calls.length < q.limit && bytes < LIST_BYTES) {
        // The request paid one at the door; each further chunk costs one more of the client's
        // rate, so a full scan costs what ten small listings do (429 `rate_limited` past it).
        if (read > 0) await this.o.limits.consume(client, 1);
        const chunk = ids.slice(read, read + LIST_CHUNK);
        read += chunk.length;
        const got = await this.o.store.briefs(chunk, legacy);
        bytes += got.bytes;
        for (const [i, id] of chunk.entries()) {
          let brief = got.briefs[i];
          // In flight: no record yet, or an approved one back in the queue: the queue knows.
          const clientId = owner.get(id) ?? brief?.clientId;
          if ((!brief || brief.status === 'queued') && clientId) {
            brief = (await this.o.dispatcher.peek(id, clientId)) ?? brief;
          }
          if (!brief) continue;
          if (user !== undefined && brief.user !== user) continue;
          if (q.tool && brief.tool !== q.tool) continue;
          if (q.status && brief.status !== q.status) continue;
          if (calls.length < q.limit) calls.push(brief);
        }
      }
      return {
        calls: calls.sort((a, b) => b.createdAt - a.createdAt),
        partial: calls.length < q.limit && read < found.length,
      };
    }, this.o.redis);
  }

  /**
   * The current state of a call the client may see: its own (admins see all). A caller signed
   * in as a user sees only that user's calls: another user's, or the client's own made without
   * a user (by API key), are as unknown to it as another client's.
   */
  async get(client: Client, id: string): Promise<CallRecord> {
    if (!isCallId(id)) throw new ApiError('not_found', `no call with id "${id}"`);
    return guardRedis(async () => {
      const record = await this.o.dispatcher.lookup(id);
      if (!record || !maySee(client, record)) {
        throw new ApiError('not_found', `no call with id "${id}"`);
      }
      return record;
    }, this.o.redis);
  }

  /** Queues a call an admin approved (its record is already `queued`). */
  async enqueueApproved(record: CallRecord, by: string): Promise<void> {
    const job = record.job;
    if (!job) throw new ApiError('internal', `approved call ${record.id} has no job`);
    await guardRedis(async () => {
      // Counted in the client's calls in flight (and ordered by it), never refused: an admin
      // decided it should run.
      await this.o.dispatcher.enqueue(
        { ...job, approvedBy: by },
        record.queue,
        0,
        this.o.admission.staleAfterMs,
      );
      await this.replicated(job.id);
    }, this.o.redis);
  }

  /**
   * With `redis.durability.replicas` > 0: returns once the call just accepted (its job, record,
   * idempotency key) is on that many replicas, so a failover cannot lose it. A WAIT that times
   * out leaves the call accepted (on the master only): counted and logged, not refused, since
   * refusing would not take it back. Redis failing over meanwhile is a 503 that says the call
   * may still run, with its id to look it up.
   */
  private async replicated(id: string): Promise<void> {
    if (!this.o.replicas.enabled) return;
    let replication: Replication;
    try {
      replication = await this.o.replicas.confirm();
    } catch (err) {
      this.o.dispatcher.forget(id);
      throw new ApiError(
        'unavailable',
        `Redis failed over before call ${id} reached a replica: it may or may not run; look it up (GET /v1/calls/${id}) or send it again with the same Idempotency-Key`,
        { cause: err, headers: { 'Retry-After': '2' }, details: { callId: id } },
      );
    }
    if (!replication.replicated) {
      this.o.metrics.unreplicated.inc();
      this.o.onUnreplicated(replication);
    }
  }

  /** Parked calls wait on a person: each client holds at most its own share of the queue. */
  /**
   * Refuses the call, before any work, when a budget it would spend is used up (`calls` for
   * every call, `sandboxSeconds` for sandboxed tools, `upstreamCalls` for upstream tools,
   * `egressBytes` for the http tools and network-enabled sandboxed tools): 429 `budget_exhausted` until the window resets. One
   * round trip, only for callers with a budget.
   */
  private async checkBudget(client: Client, tool: Tool, req: CallRequest): Promise<void> {
    if (!this.o.budgets.has(client.id, client.user)) return;
    const use = await this.o.budgets.use(client.id, client.user);
    const spends: BudgetMetric[] = ['calls'];
    if (tool.sandbox) spends.push('sandboxSeconds');
    if (tool.category.startsWith('upstream:')) spends.push('upstreamCalls');
    if (EGRESS_TOOLS.has(tool.name) || tool.sandbox?.network) spends.push('egressBytes');
    const spent = exhaustedBudget(use, spends);
    if (spent) {
      const retryAfter = Math.max(1, Math.ceil((spent.resetsAt - Date.now()) / 1000));
      const whose = spent.scope === 'user' ? 'this user' : `client "${client.id}"`;
      throw new ApiError(
        'budget_exhausted',
        `${whose} has used its ${spent.window}'s budget of ${spent.metric} (${spent.used} of ${spent.limit}); it resets at ${new Date(spent.resetsAt).toISOString()}`,
        {
          details: {
            metric: spent.metric,
            window: spent.window,
            scope: spent.scope,
            used: spent.used,
            limit: spent.limit,
            resetsAt: new Date(spent.resetsAt).toISOString(),
          },
          headers: { 'Retry-After': String(retryAfter) },
        },
      );
    }
    const remaining = budgetRemaining(use);
    if (remaining !== undefined) req.onBudget?.(remaining);
  }

  private tooManyPending(client: Client, pending: number): ApiError {
    this.o.metrics.limited.inc({ kind: 'pending_approvals', client: client.id });
    const limit = client.limits.pendingApprovals;
    return new ApiError(
      'too_many_pending_approvals',
      `client "${client.id}" already has ${pending} calls waiting for approval (its limit is ${limit}); retry when an administrator has decided some`,
      {
        headers: { 'Retry-After': String(PENDING_RETRY_SECONDS) },
        details: { pending, limit },
      },
    );
  }

  private tooManyInFlight(
    client: Client,
    refused: { inFlight: number; scope: 'client' | 'user' },
  ): ApiError {
    this.o.metrics.limited.inc({ kind: 'in_flight', client: client.id });
    const { inFlight, scope } = refused;
    const limit = scope === 'user' ? client.perUser.queued! : client.limits.queued;
    const who = scope === 'user' ? `this user of client "${client.id}"` : `client "${client.id}"`;
    return new ApiError(
      'too_many_in_flight',
      `${who} already has ${inFlight} calls queued or running (its limit is ${limit}); retry when some have finished`,
      {
        headers: { 'Retry-After': String(IN_FLIGHT_RETRY_SECONDS) },
        details: { limit, inFlight, scope, retryAfterSeconds: IN_FLIGHT_RETRY_SECONDS },
      },
    );
  }

  /**
   * A call the gateway answers itself (cache hit, tool policy): recorded, audited and counted
   * like any other, in one round trip.
   */
  private async answer(
    tool: Tool,
    client: Client,
    args: Record<string, unknown>,
    result: Pick<CallOutcome, 'status' | 'result' | 'error'> & { cached?: boolean },
    reason: string,
    parentCallId?: string,
    policy?: PolicyVerdict,
  ): Promise<CallOutcome> {
    const outcome: CallOutcome = {
      id: randomUUID(),
      tool: tool.name,
      durationMs: 0,
      cached: false,
      ...result,
    };
    const status = outcome.status === 'ok' ? 'ok' : `error:${outcome.error?.code ?? 'unknown'}`;
    const entry = this.o.audit.entry({
      event: 'call',
      client: client.id,
      ...(client.user === undefined ? {} : { user: client.user }),
      tool: tool.name,
      status,
      callId: outcome.id,
      durationMs: 0,
      args,
      reason,
      ...(parentCallId ? { parentCallId } : {}),
      ...(policy ? { policy } : {}),
    });
    const call = {
      id: outcome.id,
      tool: tool.name,
      clientId: client.id,
      ...(client.user === undefined ? {} : { user: client.user }),
      acceptedAt: Date.now(),
      redactedArgs: entry.args,
      ...(policy ? { policy } : {}),
    };
    // The record, its index entry and the audit entry before the answer (a lookup right after
    // finds the call); its stats with the next batch.
    const multi = this.o.redis.multi();
    this.o.store.addTo(multi, finishedRecord(call, 'fast', outcome));
    this.o.index.addTo(multi, client.id, [outcome.id]);
    this.o.audit.addTo(multi, entry);
    await multi.exec();
    this.o.statsBatch.add(outcome, client.id, client.user);
    return outcome;
  }

  /** A retry with a known idempotency key: the first call's result, never a second run. */
  private async existing(id: string, wait: boolean, timeoutMs: number): Promise<CallResponse> {
    // Undefined while a concurrent first request is still enqueueing: treat it as queued.
    const record = await this.o.dispatcher.lookup(id);
    if (record?.outcome) return { kind: 'done', outcome: record.outcome };
    const status = record?.status ?? 'queued';
    if (!wait || (status !== 'queued' && status !== 'running'))
      return { kind: 'accepted', id, status };
    const outcome = await this.o.dispatcher.waitFor(id, timeoutMs + this.o.syncWaitGraceMs);
    return outcome ? { kind: 'done', outcome } : { kind: 'accepted', id, status: 'running' };
  }

  private async requireWorkers(): Promise<void> {
    const now = Date.now();
    if (now - this.workersSeenAt < LIVENESS_CACHE_MS) return;
    const alive = await liveWorkers(this.o.redis, this.o.keys);
    if (alive === 0) {
      throw new ApiError('unavailable', 'no worker is running; the call was not accepted', {
        headers: { 'Retry-After': '5' },
      });
    }
    this.workersSeenAt = now;
  }

  private auditRefusal(client: Client, req: CallRequest, err: ApiError): void {
    const entry = this.o.audit.entry({
      event: 'refused',
      client: client.id,
      ...(client.user === undefined ? {} : { user: client.user }),
      tool: req.tool.length > 128 ? `${req.tool.slice(0, 128)}…` : req.tool,
      status: err.code,
      args: req.args,
      reason: err.message,
      ...(req.parentCallId ? { parentCallId: req.parentCallId } : {}),
      ...(err.code === 'policy_denied'
        ? {
            policy: {
              decision: 'deny',
              policies: (err.details as { policies: string[] }).policies,
            },
          }
        : {}),
    });
    this.o.audit.append(entry).catch(() => undefined);
  }

  /** The tool of a code-mode script, for its nested calls' `context.codeMode.parentTool`. */
  private async parentTool(parentCallId: string): Promise<string> {
    return (await this.o.dispatcher.lookup(parentCallId))?.tool ?? '';
  }

  /**
   * Whether an admin may approve a parked call (the Cedar `approve` action on its tool, with
   * the parked call's arguments); a 403 `policy_denied` if not. No policies: anyone who may.
   */
  async mayApprove(admin: Client, record: CallRecord): Promise<void> {
    const policy = this.o.policy;
    const job = record.job;
    const tool = this.o.registry.get(record.tool);
    if (!policy || !job || !tool) return;
    const decision = await policy.decide('approve', admin, tool, job.args, {
      ...(job.conversationId === undefined ? {} : { conversationId: job.conversationId }),
      ...(job.parentCallId === undefined
        ? {}
        : { codeMode: { parentTool: await this.parentTool(job.parentCallId) } }),
    });
    if (decision.decision === 'deny') throw CallPolicy.denied(decision);
  }
}

/** Whose workspace, memory and client-scoped cache a caller's calls use (CallJob.space). */
function spaceFor(client: Client): string {
  return client.isolation === 'user' ? principal(client.id, client.user) : client.id;
}

/** Whether a caller may see a call: its client's (a user: its own only), or any as an admin. */
function maySee(client: Client, record: CallRecord): boolean {
  if (client.admin) return true;
  if (record.clientId !== client.id) return false;
  return client.user === undefined || record.user === client.user;
}

function alreadyEnded(record: CallRecord): ApiError {
  return new ApiError(
    'conflict',
    `call ${record.id} has already ended (status: ${record.status}); there is nothing to cancel`,
    { details: { status: record.status } },
  );
}

/** Which shard each shard's connection is for, when a deployment has several (markShard). */
const shardOfRedis = new WeakMap<RedisClient, string>();

/**
 * Says that `redis` is the connection of shard `id` of a sharded deployment: its outage is
 * then that shard's, 503 `shard_unavailable` naming it (docs/sharding.md), for its clients only.
 */
export function markShard(redis: RedisClient, id: string): void {
  shardOfRedis.set(redis, id);
}

/**
 * The 503 for a Redis that is down: `unavailable`, or on a sharded deployment
 * `shard_unavailable` with the shard's id (the other shards' clients go on).
 */
export function redisUnavailable(redis: RedisClient, cause?: unknown): ApiError {
  const shard = shardOfRedis.get(redis);
  const options = { headers: { 'Retry-After': '2' }, ...(cause === undefined ? {} : { cause }) };
  return shard === undefined
    ? new ApiError('unavailable', UNAVAILABLE, options)
    : new ApiError(
        'shard_unavailable',
        `Redis shard "${shard}", where this client's data lives, is unavailable; the call was not accepted`,
        { ...options, details: { shard } },
      );
}

/** Redis connection failures become 503 unavailable (shard_unavailable on a sharded deployment). */
export async function guardRedis<T>(fn: () => Promise<T>, redis: RedisClient): Promise<T> {
  // Lost after being up: fail now rather than wait in the offline queue for the outage's end.
  if (isConnectionLost(redis)) throw redisUnavailable(redis);
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof ApiError) && isRedisDown(err)) throw redisUnavailable(redis, err);
    throw err;
  }
}
