/**
 * The signed-in client's sessions (docs/sessions.md): age, idle time, memory; Stop deletes one
 * (its sandbox is killed at once). An admin sees every client's (GET /v1/admin/sessions, the
 * oldest 100) with a Client column, and may stop any.
 */
import type { AdminSessionList, SessionList } from '@toolgate/gateway';
import { useState } from 'preact/hooks';
import { get, remove } from '../api.js';
import { ErrorNote, Page, useNow, usePoll } from '../components.js';
import { span } from '../format.js';

const MiB = 1024 * 1024;

export function Sessions({ admin }: { admin: boolean }) {
  const [tick, setTick] = useState(0);
  const base = admin ? '/v1/admin/sessions' : '/v1/sessions';
  const { data, error } = usePoll((s) => get<SessionList | AdminSessionList>(base, s), 5000, [
    tick,
    base,
  ]);
  const [stopError, setStopError] = useState<unknown>(undefined);
  const [stopping, setStopping] = useState<string | undefined>(undefined);
  const now = useNow();

  const stop = async (id: string) => {
    setStopping(id);
    setStopError(undefined);
    try {
      await remove(`${base}/${encodeURIComponent(id)}`);
    } catch (e) {
      setStopError(e);
    } finally {
      setStopping(undefined);
      setTick((t) => t + 1);
    }
  };

  return (
    <Page title="Sessions">
      <ErrorNote error={error ?? stopError} />
      {data && data.sessions.length === 0 && (
        <p class="empty">No sessions. Start one with POST /v1/sessions.</p>
      )}
      {data && data.sessions.length > 0 && (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">
              {admin ? "Every client's sessions" : "This key's sessions"}; updates every 5 seconds
            </caption>
            <thead>
              <tr>
                <th scope="col">Session</th>
                {admin && <th scope="col">Client</th>}
                <th scope="col">Tool</th>
                <th scope="col">Age</th>
                <th scope="col">Idle</th>
                <th scope="col">Memory</th>
                <th scope="col">Ends in</th>
                <th scope="col">
                  <span class="sr-only">Stop</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {data.sessions.map((s) => (
                <tr key={s.id} data-session-id={s.id}>
                  <td>{s.id.slice(0, 8)}</td>
                  {admin && <td>{'clientId' in s ? s.clientId : ''}</td>}
                  <td>{s.tool}</td>
                  <td>{span(now - Date.parse(s.createdAt))}</td>
                  <td>{span(now - Date.parse(s.lastUsedAt))}</td>
                  <td>
                    {s.memoryBytes === undefined ? '' : `${(s.memoryBytes / MiB).toFixed(1)} MiB`}
                  </td>
                  <td>{span(Math.max(0, Date.parse(s.expiresAt) - now))}</td>
                  <td>
                    <button
                      type="button"
                      class="secondary"
                      disabled={stopping === s.id}
                      aria-label={`Stop session ${s.id}`}
                      onClick={() => void stop(s.id)}
                    >
                      Stop
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {'truncated' in data && data.truncated && (
            <p class="empty">
              The oldest {data.sessions.length} of {data.total} sessions.
            </p>
          )}
        </div>
      )}
    </Page>
  );
}
