/**
 * Admins: the active Cedar policy set (GET /v1/policy) and a form asking what a call would get
 * (POST /v1/policy/check), decided on the gateway with the same set as real calls.
 */
import type { PolicyCheckAnswer, PolicySetView, WhoAmI } from '@toolgate/gateway';
import { useState } from 'preact/hooks';
import { get, request } from '../api.js';
import { ErrorNote, Page, usePoll } from '../components.js';

export function Policies({ who }: { who: WhoAmI }) {
  if (!who.admin)
    return (
      <Page title="Policies">
        <p role="alert">Policies are for admins only: sign in with an admin key.</p>
      </Page>
    );
  return <PolicyList />;
}

function PolicyList() {
  const { data: set, error } = usePoll((s) => get<PolicySetView>('/v1/policy', s), 10_000, []);
  return (
    <Page title="Policies">
      <ErrorNote error={error} />
      {set && (
        <>
          <p aria-label="Policy set">
            Set <code>{set.hash}</code> · {set.count} {set.count === 1 ? 'policy' : 'policies'} ·
            loaded {new Date(set.loadedAt).toLocaleString()}
            {set.truncated ? ` · the first ${set.policies.length} shown` : ''}
          </p>
          {set.lastError && (
            <p class="error" role="alert">
              {set.lastError}
            </p>
          )}
          <CheckForm />
          <table aria-label="Policies">
            <thead>
              <tr>
                <th>Id</th>
                <th>Effect</th>
                <th>File</th>
                <th>Annotations</th>
                <th>Text</th>
              </tr>
            </thead>
            <tbody>
              {set.policies.map((p) => (
                <tr key={p.id} data-policy={p.id}>
                  <td>
                    <code>{p.id}</code>
                  </td>
                  <td>{p.effect}</td>
                  <td>{p.file}</td>
                  <td>
                    {Object.entries(p.annotations)
                      .filter(([k]) => k !== 'id')
                      .map(([k, v]) => (
                        <div key={k}>
                          @{k}("{v}")
                        </div>
                      ))}
                  </td>
                  <td>
                    <details>
                      <summary>Show</summary>
                      <pre class="json">
                        {p.text}
                        {p.truncated ? '\n…' : ''}
                      </pre>
                    </details>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </Page>
  );
}

/** "Would this call be allowed?": a principal, a tool and its arguments, decided on the gateway. */
function CheckForm() {
  const [client, setClient] = useState('');
  const [user, setUser] = useState('');
  const [groups, setGroups] = useState('');
  const [tool, setTool] = useState('');
  const [args, setArgs] = useState('{}');
  const [answer, setAnswer] = useState<PolicyCheckAnswer | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);

  const check = async () => {
    setError(undefined);
    setAnswer(undefined);
    let parsed: unknown;
    try {
      parsed = JSON.parse(args);
    } catch {
      setError(new Error('Arguments must be a JSON object'));
      return;
    }
    const names = groups
      .split(',')
      .map((g) => g.trim())
      .filter(Boolean);
    setBusy(true);
    try {
      const res = await request<PolicyCheckAnswer>('/v1/policy/check', {
        json: {
          principal: {
            client: client.trim(),
            ...(user.trim() ? { user: user.trim() } : {}),
            ...(names.length > 0 ? { groups: names } : {}),
          },
          tool: tool.trim(),
          args: parsed,
        },
      });
      setAnswer(res.body);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="check-title">
      <h2 id="check-title">Would this call be allowed?</h2>
      <form
        class="filters"
        aria-label="Check a call"
        onSubmit={(e) => {
          e.preventDefault();
          void check();
        }}
      >
        <label>
          Client
          <input value={client} required onInput={(e) => setClient(e.currentTarget.value)} />
        </label>
        <label>
          User
          <input value={user} placeholder="none" onInput={(e) => setUser(e.currentTarget.value)} />
        </label>
        <label>
          Groups
          <input
            value={groups}
            placeholder="comma separated"
            onInput={(e) => setGroups(e.currentTarget.value)}
          />
        </label>
        <label>
          Tool
          <input value={tool} required onInput={(e) => setTool(e.currentTarget.value)} />
        </label>
        <label>
          Arguments (JSON)
          <textarea value={args} rows={3} onInput={(e) => setArgs(e.currentTarget.value)} />
        </label>
        <button type="submit" disabled={busy}>
          Check
        </button>
      </form>
      <section aria-live="polite" aria-label="Decision">
        <ErrorNote error={error} />
        {answer && (
          <p>
            <strong class={`decision decision-${answer.decision}`}>{answer.decision}</strong>
            {answer.policies.length > 0 ? (
              <>
                {' '}
                by <code>{answer.policies.join(', ')}</code>
              </>
            ) : (
              ' (no policy)'
            )}
            {answer.reason ? ` — ${answer.reason}` : ''}
            {answer.errors.length > 0 && (
              <>
                {' '}
                · failed to evaluate: <code>{answer.errors.join(', ')}</code>
              </>
            )}
          </p>
        )}
      </section>
    </section>
  );
}
