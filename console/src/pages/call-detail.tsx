/**
 * One call: arguments (redacted), result or error, timing, trace link, its audit entries
 * (admins), and while it has not ended, its live events (status, output, outcome).
 */
import type { AuditList, CallView, WhoAmI } from '@toolgate/gateway';
import { useEffect, useState } from 'preact/hooks';
import { follow, get, query, request } from '../api.js';
import { ErrorNote, Json, Page, Status, usePoll } from '../components.js';
import { FINAL, duration } from '../format.js';
import { href } from '../router.js';

export function CallDetail({ id, who }: { id: string; who: WhoAmI }) {
  const [call, setCall] = useState<CallView | undefined>(undefined);
  const [output, setOutput] = useState('');
  const [progress, setProgress] = useState<string | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [cancelling, setCancelling] = useState(false);
  const path = `/v1/calls/${encodeURIComponent(id)}`;

  useEffect(() => {
    const ctl = new AbortController();
    setOutput('');
    setProgress(undefined);
    void (async () => {
      try {
        const first = await get<CallView>(path, ctl.signal);
        setCall(first);
        if (FINAL.has(first.status)) return;
        // Follow it: the stream replays the output so far, then ends with the outcome.
        await follow(
          `${path}/events`,
          (m) => {
            const data = JSON.parse(m.data) as Record<string, unknown>;
            if (m.event === 'status')
              setCall((c) => c && { ...c, status: data.status as CallView['status'] });
            else if (m.event === 'output') setOutput((o) => o + String(data.text ?? ''));
            else if (m.event === 'progress')
              setProgress(
                `${String(data.progress)}${data.total !== undefined ? ` / ${String(data.total)}` : ''}${data.message ? ` ${String(data.message)}` : ''}`,
              );
          },
          { signal: ctl.signal },
        );
        if (!ctl.signal.aborted) setCall(await get<CallView>(path, ctl.signal));
      } catch (e) {
        if (!ctl.signal.aborted) setError(e);
      }
    })();
    return () => ctl.abort();
  }, [path]);

  const ended = call !== undefined && FINAL.has(call.status);
  const audit = usePoll(
    (s) =>
      who.admin
        ? get<AuditList>(`/v1/audit${query({ callId: id, limit: 50 })}`, s)
        : Promise.resolve(undefined),
    0,
    [id, who.admin, ended],
  );

  const cancel = async () => {
    setCancelling(true);
    try {
      setCall((await request<CallView>(`${path}/cancel`, { method: 'POST' })).body);
    } catch (e) {
      setError(e);
    } finally {
      setCancelling(false);
    }
  };

  const traceLink =
    who.traceUrl && call?.traceId
      ? who.traceUrl.replaceAll('{traceId}', encodeURIComponent(call.traceId))
      : undefined;

  return (
    <Page title={call ? `Call: ${call.tool}` : 'Call'}>
      <p>
        <a href={href('calls')}>← All calls</a>
      </p>
      <ErrorNote error={error} />
      {call && (
        <>
          <dl class="facts">
            <dt>Status</dt>
            <dd aria-live="polite" data-testid="call-status">
              <Status status={call.status} />
            </dd>
            <dt>Id</dt>
            <dd>
              <code>{call.id}</code>
            </dd>
            <dt>Tool</dt>
            <dd>{call.tool}</dd>
            <dt>Client</dt>
            <dd>{call.client}</dd>
            {call.user !== undefined && (
              <>
                <dt>User</dt>
                <dd>{call.user}</dd>
              </>
            )}
            <dt>Started</dt>
            <dd>{new Date(call.createdAt).toLocaleString()}</dd>
            <dt>Duration</dt>
            <dd>{duration(call.durationMs)}</dd>
            <dt>Cached</dt>
            <dd>{call.cached ? 'yes' : 'no'}</dd>
            <dt>Trace</dt>
            <dd>
              {traceLink ? (
                <a href={traceLink} target="_blank" rel="noopener noreferrer">
                  {call.traceId}
                </a>
              ) : (
                (call.traceId ?? '—')
              )}
            </dd>
            {call.approval && (
              <>
                <dt>Approval</dt>
                <dd>
                  {call.approval.decision} by {call.approval.by}
                  {call.approval.reason ? ` (“${call.approval.reason}”)` : ''}
                </dd>
              </>
            )}
            {call.policy && (
              <>
                <dt>Policy</dt>
                <dd>
                  {call.policy.decision}
                  {call.policy.policies.length > 0 ? ` (${call.policy.policies.join(', ')})` : ''}
                </dd>
              </>
            )}
            {call.cancelledBy && (
              <>
                <dt>Cancelled by</dt>
                <dd>{call.cancelledBy}</dd>
              </>
            )}
          </dl>
          {!ended && (
            <button
              type="button"
              class="danger"
              disabled={cancelling}
              onClick={() => void cancel()}
            >
              Cancel call
            </button>
          )}
          <h2>Arguments (redacted)</h2>
          <Json label="Arguments (redacted)" value={call.arguments} />
          {(output || !ended) && (
            <>
              <h2>Live output</h2>
              {progress && <p aria-live="polite">Progress: {progress}</p>}
              <pre class="output" aria-label="Live output" aria-live="polite" tabIndex={0}>
                {output || (ended ? '' : 'Waiting for output…')}
              </pre>
            </>
          )}
          {call.result !== undefined && (
            <>
              <h2>Result</h2>
              <Json label="Result" value={call.result} />
              {call.resultTruncated && (
                <p class="hint">
                  Stored copy cut at {call.resultTruncated.maxBytes} bytes (was{' '}
                  {call.resultTruncated.originalBytes}).
                </p>
              )}
            </>
          )}
          {call.error && (
            <>
              <h2>Error</h2>
              <p class="error">
                <code>{call.error.code}</code>: {call.error.message}
              </p>
              {call.error.details !== undefined && (
                <Json label="Error details" value={call.error.details} />
              )}
            </>
          )}
          {who.admin && (
            <>
              <h2>Audit entries</h2>
              <ErrorNote error={audit.error} />
              {audit.data && audit.data.length === 0 && <p class="empty">None yet.</p>}
              {audit.data && audit.data.length > 0 && (
                <div class="table-wrap">
                  <table>
                    <thead>
                      <tr>
                        <th scope="col">At</th>
                        <th scope="col">Event</th>
                        <th scope="col">Status</th>
                        <th scope="col">Client</th>
                        <th scope="col">By</th>
                        <th scope="col">Reason</th>
                      </tr>
                    </thead>
                    <tbody>
                      {audit.data.map((a, i) => (
                        <tr key={i}>
                          <td>{new Date(a.at).toLocaleTimeString()}</td>
                          <td>{a.event}</td>
                          <td>{a.status}</td>
                          <td>{a.client}</td>
                          <td>{a.by ?? ''}</td>
                          <td>{a.reason ?? ''}</td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              )}
            </>
          )}
        </>
      )}
    </Page>
  );
}
