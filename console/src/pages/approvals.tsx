/**
 * Calls parked for approval, live from `/v1/approvals/events` (a snapshot, then changes made
 * on any gateway), and the decisions taken while the page is open with the call's result.
 */
import type {
  ApprovalEvent,
  CallView,
  DecisionAnswer,
  PendingApproval,
  PendingCount,
  WhoAmI,
} from '@toolgate/gateway';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, follow, get, request } from '../api.js';
import { ErrorNote, Json, Page, Status, useNow } from '../components.js';
import { FINAL, ago, span } from '../format.js';
import { href } from '../router.js';

interface Decided {
  id: string;
  tool: string;
  client: string;
  outcome: 'approved' | 'rejected' | 'expired' | 'cancelled';
  by?: string;
  reason?: string;
  /** The call as it ended (approved calls run; the page follows them to the end). */
  call?: CallView;
}

type Payload<T extends ApprovalEvent['type']> = Omit<Extract<ApprovalEvent, { type: T }>, 'type'>;

export function Approvals({ who }: { who: WhoAmI }) {
  const [pending, setPending] = useState<PendingApproval[]>([]);
  /** Every client's pending calls against its limit (the list shows the oldest 200 only). */
  const [counts, setCounts] = useState<Record<string, PendingCount>>({});
  const [decided, setDecided] = useState<Decided[]>([]);
  const [live, setLive] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  /** Calls this operator tried to decide after another decision had won. */
  /** Sharded: the shards whose parked calls the snapshot could not read (Redis down). */
  const [missing, setMissing] = useState<string[]>([]);
  const [lost, setLost] = useState<ReadonlySet<string>>(new Set());

  useEffect(() => {
    if (!who.admin) return undefined;
    const ctl = new AbortController();
    // What the list knew of each call, to name it once it has left the list.
    const known = new Map<string, PendingApproval>();
    const count = (client: string, delta: number) =>
      setCounts((all) => {
        const c = all[client] ?? { pending: 0, limit: 0 };
        return { ...all, [client]: { ...c, pending: Math.max(0, c.pending + delta) } };
      });
    const leave = (id: string, client: string, d: Omit<Decided, 'id' | 'tool' | 'client'>) => {
      const p = known.get(id);
      count(client, -1);
      setPending((list) => list.filter((x) => x.id !== id));
      setDecided((list) => [
        { id, tool: p?.tool ?? '?', client: p?.client ?? '?', ...d },
        ...list.filter((x) => x.id !== id).slice(0, 19),
      ]);
      if (d.outcome === 'approved' || d.outcome === 'rejected') void watch(id);
    };
    // An approved call runs now; show its result when it has one.
    const watch = async (id: string) => {
      for (let i = 0; i < 120 && !ctl.signal.aborted; i++) {
        try {
          const call = await get<CallView>(`/v1/calls/${encodeURIComponent(id)}`, ctl.signal);
          setDecided((list) => list.map((x) => (x.id === id ? { ...x, call } : x)));
          if (FINAL.has(call.status)) return;
        } catch {
          if (ctl.signal.aborted) return;
        }
        await new Promise((r) => setTimeout(r, 500));
      }
    };
    void follow(
      '/v1/approvals/events',
      (m) => {
        const data = JSON.parse(m.data) as unknown;
        switch (m.event as ApprovalEvent['type']) {
          case 'snapshot': {
            const { pending, byClient, unavailableShards } = data as Payload<'snapshot'>;
            for (const p of pending) known.set(p.id, p);
            setPending(pending);
            setCounts(byClient);
            setMissing(unavailableShards ?? []);
            break;
          }
          case 'parked': {
            const { approval } = data as Payload<'parked'>;
            known.set(approval.id, approval);
            count(approval.client, 1);
            setPending((list) => [...list.filter((x) => x.id !== approval.id), approval]);
            break;
          }
          case 'decided': {
            const d = data as Payload<'decided'>;
            leave(d.id, d.client, {
              outcome: d.decision,
              by: d.by,
              ...(d.reason ? { reason: d.reason } : {}),
            });
            break;
          }
          case 'expired': {
            const d = data as Payload<'expired'>;
            leave(d.id, d.client, { outcome: 'expired' });
            break;
          }
          case 'cancelled': {
            const d = data as Payload<'cancelled'>;
            leave(d.id, d.client, { outcome: 'cancelled', by: d.by });
            break;
          }
        }
      },
      {
        signal: ctl.signal,
        reconnect: true,
        onState: (on) => {
          setLive(on);
          if (on) setError(undefined);
        },
      },
    ).catch(setError);
    return () => ctl.abort();
  }, [who.admin]);

  if (!who.admin)
    return (
      <Page title="Approvals">
        <p role="alert">
          Approvals are for admins only: sign in with an admin key to decide calls.
        </p>
      </Page>
    );

  return (
    <Page title="Approvals">
      <p class="live-state" aria-live="polite">
        {live ? 'Live: updates as calls are parked, decided or expire.' : 'Connecting…'}
      </p>
      <ErrorNote error={error} />
      {missing.length > 0 && (
        <p class="error" role="alert">
          Redis shard{missing.length > 1 ? 's' : ''} {missing.join(', ')} unavailable: calls parked
          there are not shown.
        </p>
      )}
      <PendingByClient counts={counts} />
      <h2>Pending ({pending.length})</h2>
      <div aria-live="polite">
        {pending.length === 0 ? (
          <p class="empty">No call is waiting for approval.</p>
        ) : (
          <ul class="cards" aria-label="Pending approvals">
            {pending.map((p) => (
              <PendingCard
                key={p.id}
                approval={p}
                onLost={() => setLost((s) => new Set(s).add(p.id))}
              />
            ))}
          </ul>
        )}
      </div>
      <h2>Decided while this page was open</h2>
      <div aria-live="polite">
        {decided.length === 0 ? (
          <p class="empty">Nothing yet.</p>
        ) : (
          <ul class="cards" aria-label="Decided approvals">
            {decided.map((d) => (
              <li key={d.id} class="card" aria-label={`${d.tool} call ${d.id}`}>
                <p>
                  <strong>{d.tool}</strong> from {d.client}: <Status status={d.outcome} />
                  {d.by ? ` by ${d.by}` : ''}
                  {d.reason ? ` (“${d.reason}”)` : ''}
                </p>
                {lost.has(d.id) && (
                  <p class="error" role="alert">
                    Already decided: another operator was first, your decision was not applied.
                  </p>
                )}
                {d.call && (
                  <p>
                    Call: <Status status={d.call.status} />{' '}
                    <a href={href('calls', d.id)}>details of call {d.id}</a>
                  </p>
                )}
                {d.call?.result !== undefined && <Json label="Result" value={d.call.result} />}
                {d.call?.error && d.call.status !== 'rejected' && (
                  <p class="error">
                    {d.call.error.code}: {d.call.error.message}
                  </p>
                )}
              </li>
            ))}
          </ul>
        )}
      </div>
    </Page>
  );
}

function PendingCard({ approval: p, onLost }: { approval: PendingApproval; onLost: () => void }) {
  const now = useNow();
  const [rejecting, setRejecting] = useState(false);
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);

  const decide = async (decision: 'approve' | 'reject') => {
    setBusy(true);
    setError(undefined);
    try {
      await request<DecisionAnswer>(`/v1/approvals/${encodeURIComponent(p.id)}/${decision}`, {
        json: decision === 'reject' && reason.trim() ? { reason: reason.trim() } : {},
      });
      // The `decided` event moves the card; nothing to do here.
    } catch (e) {
      // 409: another decision won. The `decided` event moves the card (if it has not yet);
      // the page remembers, so the note survives the move.
      if (e instanceof ApiError && e.status === 409) onLost();
      setError(
        e instanceof ApiError && e.status === 409
          ? new Error('Already decided: another operator was first.')
          : e,
      );
      setBusy(false);
    }
  };

  const left = Date.parse(p.expiresAt) - now;
  const reasonId = `reason-${p.id}`;
  return (
    <li class="card" aria-label={`${p.tool} call ${p.id}`}>
      <dl class="facts">
        <dt>Tool</dt>
        <dd>{p.tool}</dd>
        <dt>Client</dt>
        <dd>{p.client}</dd>
        <dt>Conversation</dt>
        <dd>{p.conversationId ?? '—'}</dd>
        <dt>Age</dt>
        <dd>{ago(p.createdAt, now)}</dd>
        <dt>Expires</dt>
        <dd>{left > 0 ? `in ${span(left)}` : 'now'}</dd>
      </dl>
      <Json label="Arguments (redacted)" value={p.arguments} />
      <div class="actions">
        <button type="button" disabled={busy} onClick={() => void decide('approve')}>
          Approve
        </button>
        {!rejecting && (
          <button type="button" class="danger" disabled={busy} onClick={() => setRejecting(true)}>
            Reject
          </button>
        )}
      </div>
      {rejecting && (
        <form
          class="reject"
          onSubmit={(e) => {
            e.preventDefault();
            void decide('reject');
          }}
        >
          <label for={reasonId}>Reason (optional)</label>
          <input
            id={reasonId}
            value={reason}
            maxLength={500}
            onInput={(e) => setReason(e.currentTarget.value)}
          />
          <button type="submit" class="danger" disabled={busy}>
            Confirm reject
          </button>
          <button type="button" class="secondary" onClick={() => setRejecting(false)}>
            Cancel
          </button>
        </form>
      )}
      <ErrorNote error={error} />
    </li>
  );
}

/** Each client's parked calls against its `limits.pendingApprovals` (429 beyond it). */
function PendingByClient({ counts }: { counts: Record<string, PendingCount> }) {
  const rows = Object.entries(counts)
    .filter(([, c]) => c.pending > 0)
    .sort((a, b) => b[1].pending - a[1].pending);
  if (rows.length === 0) return null;
  return (
    <table aria-label="Pending approvals per client">
      <thead>
        <tr>
          <th scope="col">Client</th>
          <th scope="col">Pending</th>
          <th scope="col">Limit</th>
        </tr>
      </thead>
      <tbody>
        {rows.map(([client, c]) => (
          <tr key={client} class={c.limit > 0 && c.pending >= c.limit ? 'at-limit' : undefined}>
            <td>{client}</td>
            <td>{c.pending}</td>
            <td>{c.limit > 0 ? c.limit : '—'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
