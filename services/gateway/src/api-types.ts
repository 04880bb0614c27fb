/**
 * The JSON the gateway's routes answer, as types: the operator console (console/) and any
 * TypeScript client compile against these, so a contract change fails their build. Each type
 * names its route; docs/http-api.md has the prose.
 */
import type { AuditEntry, CallStatus } from '@toolgate/calls';
import type { Tool } from '@toolgate/registry';

export type { AuditEntry, CallStatus };
/** `GET /v1/upstreams`: each upstream and its tools' pins (docs/upstreams.md). */
export type { UpstreamReport, UpstreamToolReport, ScanFlag } from '@toolgate/upstreams';

/** `POST /v1/upstreams/{id}/tools/{tool}/approve` (200). */
export interface UpstreamApproval {
  upstream: string;
  tool: string;
  status: 'approved';
  hash: string;
  approvedBy?: string;
  approvedAt?: string;
}

/** Any error answer: `{"error":{"code","message","details?"}}`. */
export interface ErrorAnswer {
  error: { code: string; message: string; details?: unknown };
}

/** `GET /tools`: everything a client needs to know about a tool. */
export interface NativeTool {
  name: string;
  description: string;
  category: string;
  parameters: Record<string, unknown>;
  risk: Tool['risk'];
  requiresApproval: boolean;
  sandboxed: boolean;
  /** Whether the tool has a strict form for OpenAI strict mode (docs/dialects.md). */
  strict: boolean;
  timeoutMs: number;
  cacheTtlSeconds: number;
}

/** `GET /v1/me`: who the key is, and what the console may show it. */
export interface WhoAmI {
  client: string;
  admin: boolean;
  /** Signed in with an OAuth token: the user it names (if any) and its scopes. */
  user?: string;
  scopes?: string[];
  /** A trace viewer URL with `{traceId}` in it (`console.traceUrl`), when configured. */
  traceUrl?: string;
  /** Admins, with `server.queueDashboard.enabled`: where BullMQ's dashboard is (`/admin/queues`). */
  queueDashboard?: string;
  /** Admins, with `policy.cedar` configured: the console shows its Policies page. */
  policies?: boolean;
}

/** `GET /v1/policy` (admins): the active Cedar policy set (docs/policy.md). */
export interface PolicySetView {
  /** sha256 of the schema and files, 16 hex digits (as /readyz and the metric show it). */
  hash: string;
  loadedAt: string;
  /** Policies in the set (the list below stops at 2,000). */
  count: number;
  /** Present when the files on disk were refused at the last reload (a fixed sentence). */
  lastError?: string;
  policies: {
    id: string;
    effect: 'permit' | 'forbid';
    file: string;
    annotations: Record<string, string>;
    /** The policy's text, cut at 4,096 characters (then `truncated`). */
    text: string;
    truncated?: true;
  }[];
  /** More than 2,000 policies: the rest are left out. */
  truncated?: true;
}

/** `POST /v1/policy/check` (admins): the decision a call would get with the active set. */
export interface PolicyCheckAnswer {
  decision: 'allow' | 'deny' | 'approval';
  /** The deciding policies: the satisfied forbids of a deny, the satisfied permits otherwise. */
  policies: string[];
  /** Policies that failed to evaluate. */
  errors: string[];
  reason?: string;
  hash: string;
}

/** One session as `GET /v1/sessions` lists it (docs/sessions.md). */
export interface SessionView {
  id: string;
  tool: 'run_python' | 'run_shell';
  createdAt: string;
  lastUsedAt: string;
  expiresAt: string;
  /** Its sandbox's memory when its worker last looked (every 10 s), once started. */
  memoryBytes?: number;
  /** The user it belongs to (listed to the client's API key, which sees all of them). */
  user?: string;
}

/** `GET /v1/secrets/{client}[?user=]`: names and update times only (values are write-only). */
export interface SecretList {
  client: string;
  user?: string;
  secrets: { name: string; updatedAt: string }[];
}

/** `PUT /v1/secrets/{client}/{name}[?user=]`: 201 when created, 200 when replaced. */
export interface SecretSaved {
  client: string;
  name: string;
  user?: string;
  updatedAt: string;
}

/** `GET /v1/sessions`: the caller's own sessions. */
export interface SessionList {
  sessions: SessionView[];
}

/** `GET /v1/admin/sessions`: every client's sessions (a bounded page, oldest first). */
export interface AdminSessionList {
  sessions: (SessionView & { clientId: string; workerId: string })[];
  /** Sessions the hosts hold in all (may count a few that just expired). */
  total: number;
  /** More sessions exist than this page (`limit`) shows. */
  truncated: boolean;
}

/** `POST /tools/{name}/execute` (200), and the `outcome` of a call's events. */
export interface ExecuteAnswer {
  id: string;
  tool: string;
  status: 'ok' | 'error' | 'cancelled';
  result?: unknown;
  error?: { code: string; message: string; details?: unknown };
  durationMs: number;
  cached: boolean;
}

/** `POST /tools/{name}/execute` answered 202 (queued, parked for approval, still running). */
export interface AcceptedAnswer {
  id: string;
  status: CallStatus;
}

/** `GET /v1/calls/{id}`, `POST /v1/calls/{id}/cancel`. */
export interface CallView {
  id: string;
  tool: string;
  status: CallStatus;
  createdAt: string;
  /** The client that made the call. */
  client: string;
  /** The user the client acted for (an OAuth token's user claim), when known. */
  user?: string;
  /** The call's arguments, redacted (as the audit log keeps them). */
  arguments?: unknown;
  /** The trace of the call, when tracing was on. */
  traceId?: string;
  cancelledBy?: string;
  approval?: {
    decision: 'approved' | 'rejected' | 'expired';
    by: string;
    at: string;
    reason?: string;
  };
  /** The Cedar policies' decision and the deciding policies (with `policy.cedar`). */
  policy?: { decision: 'allow' | 'deny' | 'approval'; policies: string[] };
  result?: unknown;
  error?: { code: string; message: string; details?: unknown };
  durationMs?: number;
  cached?: boolean;
  resultTruncated?: { originalBytes: number; maxBytes: number };
}

/** One row of `GET /v1/calls`. */
export interface CallListItem {
  id: string;
  tool: string;
  client: string;
  /** The user the client acted for (an OAuth token's user claim), when known. */
  user?: string;
  status: CallStatus;
  createdAt: string;
  durationMs?: number;
  cached?: boolean;
  errorCode?: string;
}

/**
 * `GET /v1/calls?client=&user=&tool=&status=&since=&limit=`: recent calls, newest first (a
 * client sees its own, a user signed in with a token only its own; admins everyone's, or one
 * client's with `client=`, one user's with `user=`).
 */
export interface CallList {
  calls: CallListItem[];
  /**
   * The scan stopped at its bound (1000 calls or 1 MiB of briefs, docs/http-api.md) with
   * calls left unread: older matches may exist beyond what was listed.
   */
  partial?: true;
}

/** One row of `GET /v1/approvals`. */
export interface PendingApproval {
  id: string;
  tool: string;
  client: string;
  conversationId?: string;
  /** Redacted. */
  arguments: unknown;
  createdAt: string;
  expiresAt: string;
}

/** `POST /v1/approvals/{id}/approve|reject` (409 `conflict` when another decision won). */
export interface DecisionAnswer {
  id: string;
  status: CallStatus;
  decision: 'approved' | 'rejected';
  by: string;
}

/**
 * `GET /v1/approvals/events` (admin, Server-Sent Events): the event name is `type`, the data
 * the rest. `snapshot` first, then changes as they happen on any gateway.
 */
export type ApprovalEvent =
  | {
      type: 'snapshot';
      /** The oldest pending calls, at most 200 (`total` counts them all). */
      pending: PendingApproval[];
      total: number;
      /** Per configured client: its calls pending, and its `limits.pendingApprovals`. */
      byClient: Record<string, PendingCount>;
      /** Sharded: the shards whose pending calls could not be read (their Redis is down). */
      unavailableShards?: string[];
    }
  | { type: 'parked'; approval: PendingApproval }
  | {
      type: 'decided';
      id: string;
      client: string;
      decision: 'approved' | 'rejected';
      by: string;
      reason?: string;
    }
  | { type: 'expired'; id: string; client: string }
  | { type: 'cancelled'; id: string; client: string; by: string };

/** One client's calls parked for approval, against its limit. */
/** One shard as `GET /v1/shards` lists it. */
export interface ShardView {
  id: string;
  home: boolean;
  /** As this gateway's connection sees it. */
  state: 'up' | 'down';
  /** The clients on it now: configured or hashed there, or moved there. */
  clients: string[];
  /** Clients moving away from this shard now. */
  moving: string[];
}

/** `GET /v1/shards` (admin): the Redis shards (docs/sharding.md). */
export interface ShardList {
  shards: ShardView[];
}

export interface PendingCount {
  pending: number;
  limit: number;
}

/** `GET /v1/audit?callId=&client=&tool=&event=&limit=` (admin): newest first. */
export type AuditList = AuditEntry[];

/**
 * `GET /v1/series?minutes=60`: per-minute points, oldest first, the last one the current
 * (partial) minute. Per tool: calls, errors and p95 latency (null where a minute had no call);
 * gauges sampled once a minute (null where nobody sampled).
 */
export interface SeriesView {
  /** ISO time of the first point. */
  from: string;
  stepSeconds: 60;
  points: number;
  tools: Record<string, { calls: number[]; errors: number[]; p95Ms: (number | null)[] }>;
  queue: { fast: (number | null)[]; sandbox: (number | null)[] };
  workers: (number | null)[];
  warm: (number | null)[];
  /**
   * One user's calls and errors per minute: a caller signed in as a user always gets its own;
   * an admin asks with `?client=<id>&user=<sub>`.
   */
  user?: { id: string; calls: number[]; errors: number[] };
}

/** One metric of a budget in one UTC window (`GET /v1/budget`, docs/budgets.md). */
export interface BudgetWindowView {
  window: 'day' | 'month';
  /** Spent so far (sandboxSeconds in whole seconds, rounded up). */
  used: number;
  limit: number;
  remaining: number;
  /** ISO time the window ends and its count starts again. */
  resetsAt: string;
}

/** A budget's use per metric (`calls`, `sandboxSeconds`, `upstreamCalls`, `egressBytes`). */
export type BudgetView = Partial<
  Record<'calls' | 'sandboxSeconds' | 'upstreamCalls' | 'egressBytes', BudgetWindowView[]>
>;

/**
 * `GET /v1/budget`: one client's use (and its user's, with a user's token); an admin without
 * `?client=` gets every client with a budget.
 */
export type BudgetReport =
  | { client: string; budget: BudgetView; user?: { id: string; budget: BudgetView } }
  | { clients: { client: string; budget: BudgetView }[] };
