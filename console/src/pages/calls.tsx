/** Recent calls, newest first, refreshed every 2 s, with filters kept in the page. */
import type { CallList, CallStatus, NativeTool, WhoAmI } from '@toolgate/gateway';
import { useState } from 'preact/hooks';
import { get, query } from '../api.js';
import { ErrorNote, Page, Status, usePoll } from '../components.js';
import { STATUSES, duration, time } from '../format.js';
import { href } from '../router.js';

const SINCE: [string, string, number | undefined][] = [
  ['15m', 'Last 15 minutes', 15],
  ['1h', 'Last hour', 60],
  ['24h', 'Last 24 hours', 24 * 60],
  ['all', 'Any time', undefined],
];

export function Calls({ who }: { who: WhoAmI }) {
  const [client, setClient] = useState('');
  // A user signed in with a token lists only its own calls: no user filter to offer.
  const [user, setUser] = useState('');
  const [tool, setTool] = useState('');
  const [status, setStatus] = useState<CallStatus | ''>('');
  const [since, setSince] = useState('1h');
  const { data: tools } = usePoll((s) => get<NativeTool[]>('/tools', s), 0, []);
  const { data, error } = usePoll(
    (s) => {
      const minutes = SINCE.find(([id]) => id === since)?.[2];
      return get<CallList>(
        `/v1/calls${query({
          client: who.admin ? client.trim() : undefined,
          user: who.user === undefined ? user.trim() : undefined,
          tool,
          status,
          since:
            minutes === undefined
              ? undefined
              : new Date(Date.now() - minutes * 60_000).toISOString(),
          limit: 100,
        })}`,
        s,
      );
    },
    2000,
    [client, user, tool, status, since, who.admin, who.user],
  );

  return (
    <Page title="Calls">
      <form class="filters" aria-label="Filters" onSubmit={(e) => e.preventDefault()}>
        {who.admin && (
          <label>
            Client
            <input
              value={client}
              placeholder="any"
              onChange={(e) => setClient(e.currentTarget.value)}
            />
          </label>
        )}
        {who.user === undefined && (
          <label>
            User
            <input
              value={user}
              placeholder="any"
              onChange={(e) => setUser(e.currentTarget.value)}
            />
          </label>
        )}
        <label>
          Tool
          <select value={tool} onChange={(e) => setTool(e.currentTarget.value)}>
            <option value="">any</option>
            {tools?.map((t) => (
              <option key={t.name} value={t.name}>
                {t.name}
              </option>
            ))}
          </select>
        </label>
        <label>
          Status
          <select
            value={status}
            onChange={(e) => setStatus(e.currentTarget.value as CallStatus | '')}
          >
            <option value="">any</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Time
          <select value={since} onChange={(e) => setSince(e.currentTarget.value)}>
            {SINCE.map(([id, label]) => (
              <option key={id} value={id}>
                {label}
              </option>
            ))}
          </select>
        </label>
      </form>
      <ErrorNote error={error} />
      {data && data.calls.length === 0 && <p class="empty">No call matches.</p>}
      {data && data.calls.length > 0 && (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">Recent calls, newest first; updates every 2 seconds</caption>
            <thead>
              <tr>
                <th scope="col">Status</th>
                <th scope="col">Tool</th>
                <th scope="col">Client</th>
                <th scope="col">User</th>
                <th scope="col">Started</th>
                <th scope="col">Duration</th>
                <th scope="col">Cached</th>
                <th scope="col">Error</th>
                <th scope="col">Call</th>
              </tr>
            </thead>
            <tbody>
              {data.calls.map((c) => (
                <tr key={c.id} data-call-id={c.id}>
                  <td>
                    <Status status={c.status} />
                  </td>
                  <td>{c.tool}</td>
                  <td>{c.client}</td>
                  <td>{c.user ?? ''}</td>
                  <td>{time(c.createdAt)}</td>
                  <td>{duration(c.durationMs)}</td>
                  <td>{c.cached ? 'yes' : ''}</td>
                  <td>{c.errorCode ?? ''}</td>
                  <td>
                    <a href={href('calls', c.id)} aria-label={`Details of ${c.tool} call ${c.id}`}>
                      {c.id.slice(0, 8)}
                    </a>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </Page>
  );
}
