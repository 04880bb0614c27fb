/**
 * The active Cedar policy set of one process: decides calls, tells listings which tools no
 * policy could permit, and follows the files (a bad new set is refused; the last good one
 * keeps deciding).
 */
import { watch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';
import {
  isAuthorizedPartial,
  statefulIsAuthorized,
  type CedarValueJson,
} from '@cedar-policy/cedar-wasm/nodejs';
import type { Logger } from '@toolgate/log';
import {
  cedarRequest,
  entitiesOf,
  principalUid,
  type PolicyPrincipal,
  type PolicyRequest,
  type PolicyTool,
} from './context.js';
import { PolicySetError } from './errors.js';
import { EntityType } from './names.js';
import {
  loadPolicySet,
  type LoadedPolicySet,
  type PolicyInfo,
  type PolicySource,
} from './policy-set.js';

export type PolicyOutcome = 'allow' | 'deny' | 'approval';

export interface PolicyDecision {
  decision: PolicyOutcome;
  /** The determining policies: the satisfied forbids of a deny, the satisfied permits otherwise. */
  policies: string[];
  /** A deny's message: the deciding forbid's `@reason`, or why no policy permits. */
  reason?: string;
  /** Policies that failed to evaluate (skipped; a failing forbid denies). */
  errors: string[];
}

export interface Listability {
  listed: boolean;
  /** The policies that decide it: a forbid that always applies, or none when no permit can. */
  policies: string[];
  reason: string;
}

export interface PolicyState {
  hash: string;
  loadedAt: number;
  /** Why the files on disk are not the active set (the last reload failed), if they are not. */
  lastError?: string;
  policies: number;
}

export interface PolicyEngineOptions extends PolicySource {
  logger: Logger;
  /** Each reload: `ok` with the new hash, or the refusal. */
  onReload?: (result: { ok: true; hash: string } | { ok: false; error: string }) => void;
  /** Each policy that failed to evaluate in a decision. */
  onEvaluationError?: (policy: string) => void;
  /** How long file events settle before a reload. */
  debounceMs?: number;
}

/** Listability answers kept per set, caller and tool (a listing asks once per tool). */
const LISTING_CACHE = 10_000;

export class PolicyEngine {
  private set: LoadedPolicySet;
  private loadedAt = Date.now();
  private lastError: string | undefined;
  private watchers: FSWatcher[] = [];
  private timer: NodeJS.Timeout | undefined;
  private listing = new Map<string, Listability>();
  private readonly log: Logger;

  /** Loads the set now: throws PolicySetError when it does not parse or validate. */
  constructor(private readonly o: PolicyEngineOptions) {
    this.log = o.logger.child({ component: 'policy' });
    this.set = loadPolicySet(o);
    this.log.info(
      { hash: this.set.hash, policies: this.set.policies.size },
      'cedar policies loaded',
    );
  }

  state(): PolicyState {
    return {
      hash: this.set.hash,
      loadedAt: this.loadedAt,
      policies: this.set.policies.size,
      ...(this.lastError === undefined ? {} : { lastError: this.lastError }),
    };
  }

  list(): PolicyInfo[] {
    return [...this.set.policies.values()];
  }

  /** Re-reads the files: the new set replaces the active one only if it is valid. */
  reload(): boolean {
    try {
      const next = loadPolicySet(this.o);
      if (next.hash !== this.set.hash) {
        this.set = next;
        this.loadedAt = Date.now();
        this.listing = new Map();
        this.log.info({ hash: next.hash, policies: next.policies.size }, 'cedar policies reloaded');
      }
      this.lastError = undefined;
      this.o.onReload?.({ ok: true, hash: next.hash });
      return true;
    } catch (err) {
      this.lastError = err instanceof PolicySetError ? err.message : (err as Error).message;
      this.log.error(
        { hash: this.set.hash, error: this.lastError },
        'cedar policies not reloaded: the new files are invalid; the last good set keeps deciding',
      );
      this.o.onReload?.({ ok: false, error: this.lastError });
      return false;
    }
  }

  /** Watches the policy folder (or file's folder) and the schema's, reloading on change. */
  watch(): void {
    const dirs = new Set([this.o.policies, dirname(this.o.schema)]);
    for (const dir of dirs) {
      try {
        const w = watch(dir, () => this.schedule());
        w.on('error', (err) => this.log.warn({ dir, err: err.message }, 'policy watch failed'));
        this.watchers.push(w);
      } catch (err) {
        this.log.warn({ dir, err: (err as Error).message }, 'cannot watch policy files');
      }
    }
  }

  close(): void {
    clearTimeout(this.timer);
    for (const w of this.watchers) w.close();
    this.watchers = [];
  }

  private schedule(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.reload(), this.o.debounceMs ?? 200);
    this.timer.unref();
  }

  /**
   * Decides a request with the active set. Throws PolicyContextError when the request is past
   * the context's bounds (the caller refuses the call). Never allows on an engine failure.
   */
  decide(req: PolicyRequest): PolicyDecision {
    const set = this.set;
    const r = cedarRequest(req);
    const answer = statefulIsAuthorized({
      principal: r.principal,
      action: r.action,
      resource: r.resource,
      context: r.context,
      entities: r.entities,
      preparsedPolicySetId: set.sliceFor(req.tool.name),
    });
    if (answer.type === 'failure') {
      const message = answer.errors.map((e) => e.message).join('; ');
      this.log.error({ hash: set.hash, error: message }, 'cedar could not evaluate a request');
      return {
        decision: 'deny',
        policies: [],
        reason: `the policies could not be evaluated: ${message}`,
        errors: [],
      };
    }
    const { decision, diagnostics } = answer.response;
    const errors = diagnostics.errors.map((e) => e.policyId);
    for (const id of errors) this.o.onEvaluationError?.(id);
    // Cedar skips a policy that errors: a forbid that could not say no must not become a yes.
    const failedForbids = errors.filter((id) => set.policies.get(id)?.effect === 'forbid');
    if (failedForbids.length > 0) {
      const detail = diagnostics.errors.find((e) => e.policyId === failedForbids[0])?.error.message;
      return {
        decision: 'deny',
        policies: failedForbids,
        reason: `policy "${failedForbids[0]}" failed to evaluate (${detail ?? 'error'}); a forbid that fails denies`,
        errors,
      };
    }
    const ids = diagnostics.reason;
    if (decision === 'deny') {
      const forbid = ids.map((id) => set.policies.get(id)).find((p) => p !== undefined);
      return {
        decision: 'deny',
        policies: ids,
        reason: forbid
          ? (forbid.reason ?? `forbidden by policy "${forbid.id}"`)
          : `no policy permits ${req.principal.user === undefined ? `client "${req.principal.client}"` : `user "${req.principal.user}"`} to ${req.action} "${req.tool.name}"`,
        errors,
      };
    }
    const approval = ids.some((id) => set.policies.get(id)?.approval);
    return { decision: approval ? 'approval' : 'allow', policies: ids, errors };
  }

  /**
   * Whether a caller's listing shows a tool: left out only when no call to it could be
   * permitted whatever its arguments and context (Cedar's partial evaluation with the context
   * unknown decides `deny`). Anything else, an evaluation failure too, keeps it listed: each
   * call is still decided on its own.
   */
  listable(principal: PolicyPrincipal, tool: PolicyTool): Listability {
    const key = `${this.set.hash}\0${principal.client}\0${principal.user ?? ''}\0${[...(principal.groups ?? [])].sort().join(',')}\0${tool.name}`;
    const cached = this.listing.get(key);
    if (cached) return cached;
    const unknown = (name: string): CedarValueJson => ({ __extn: { fn: 'unknown', arg: name } });
    const answer = isAuthorizedPartial({
      principal: principalUid(principal),
      action: { type: EntityType.Action, id: 'call' },
      resource: { type: EntityType.Tool, id: tool.name },
      context: {
        args: unknown('args'),
        conversationId: unknown('conversationId'),
        now: unknown('now'),
        sourceIp: unknown('sourceIp'),
        codeMode: unknown('codeMode'),
        session: unknown('session'),
        annotations: { readOnly: tool.readOnly, destructive: tool.destructive },
        budget: unknown('budget'),
      },
      entities: entitiesOf(principal, tool),
      policies: { staticPolicies: this.set.texts },
    });
    let result: Listability;
    if (answer.type === 'residuals' && answer.response.decision === 'deny') {
      const forbids = answer.response.satisfied.filter(
        (id) => this.set.policies.get(id)?.effect === 'forbid',
      );
      result = {
        listed: false,
        policies: forbids,
        reason:
          forbids.length > 0
            ? `forbidden whatever the arguments by ${forbids.map((id) => `"${id}"`).join(', ')}`
            : 'no policy could permit this caller to call it, whatever the arguments',
      };
    } else {
      const may = answer.type === 'residuals' ? answer.response.mayBeDetermining : [];
      result = {
        listed: true,
        policies: may,
        reason:
          answer.type === 'residuals'
            ? answer.response.decision === 'allow'
              ? 'permitted whatever the arguments'
              : 'some calls may be permitted: each call is decided on its arguments'
            : 'listed: the policies could not be evaluated in advance; each call is decided on its own',
      };
    }
    if (this.listing.size >= LISTING_CACHE) this.listing.clear();
    this.listing.set(key, result);
    return result;
  }
}
