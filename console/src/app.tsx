/** The shell: sign-in gate, who is signed in, navigation, and the page the hash names. */
import type { WhoAmI } from '@toolgate/gateway';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { get, openQueueDashboard, session, whenUnauthorized } from './api.js';
import { ErrorNote } from './components.js';
import { href, useRoute } from './router.js';
import { Approvals } from './pages/approvals.js';
import { CallDetail } from './pages/call-detail.js';
import { Calls } from './pages/calls.js';
import { Overview } from './pages/overview.js';
import { Policies } from './pages/policies.js';
import { Connect, Secrets } from './pages/secrets.js';
import { Sessions } from './pages/sessions.js';
import { SignIn } from './pages/sign-in.js';
import { Tools } from './pages/tools.js';
import { Upstreams } from './pages/upstreams.js';

export function App() {
  const [who, setWho] = useState<WhoAmI | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [checking, setChecking] = useState(session.key() !== null);
  const route = useRoute();

  const signOut = useCallback(() => {
    session.signOut();
    setWho(undefined);
    location.hash = '';
  }, []);

  useEffect(() => {
    whenUnauthorized(signOut);
    // A key kept in this tab from before a reload: check it is still good.
    if (session.key() === null) return;
    get<WhoAmI>('/v1/me')
      .then(setWho)
      .catch((e: unknown) => {
        session.signOut();
        setError(e);
      })
      .finally(() => setChecking(false));
  }, [signOut]);

  if (checking) return <p class="loading">Checking your key…</p>;
  if (!who)
    return (
      <SignIn
        initialError={error}
        onSignedIn={(w) => {
          setError(undefined);
          setWho(w);
        }}
      />
    );

  const page = route[0] ?? 'overview';
  const nav: [string, string][] = [
    ['overview', 'Overview'],
    ...(who.admin ? [['approvals', 'Approvals'] as [string, string]] : []),
    ['calls', 'Calls'],
    ['tools', 'Tools'],
    ['sessions', 'Sessions'],
    ...(who.admin ? [['upstreams', 'Upstreams'] as [string, string]] : []),
    ...(who.admin ? [['secrets', 'Secrets'] as [string, string]] : []),
    ...(who.admin && who.policies ? [['policies', 'Policies'] as [string, string]] : []),
  ];
  const queues = who.queueDashboard;
  return (
    <>
      <a class="skip" href="#main" onClick={skipToMain}>
        Skip to content
      </a>
      <header class="top">
        <span class="brand">toolgate</span>
        <nav aria-label="Pages">
          <ul>
            {nav.map(([id, label]) => (
              <li key={id}>
                <a href={href(id)} aria-current={page === id ? 'page' : undefined}>
                  {label}
                </a>
              </li>
            ))}
            {queues !== undefined && (
              <li>
                <a
                  href={`${queues}/`}
                  onClick={(e) => {
                    // A page of the gateway's, not a console route: it gets the key first.
                    e.preventDefault();
                    openQueueDashboard(queues).catch(setError);
                  }}
                >
                  Queues
                </a>
              </li>
            )}
          </ul>
        </nav>
        <span class="who">
          Signed in as <strong>{who.client}</strong>
          {who.admin ? ' (admin)' : ''}
        </span>
        <button type="button" class="secondary" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        <ErrorNote error={error} />
        {page === 'overview' && <Overview />}
        {page === 'approvals' && <Approvals who={who} />}
        {page === 'calls' && route[1] === undefined && <Calls who={who} />}
        {page === 'calls' && route[1] !== undefined && <CallDetail id={route[1]} who={who} />}
        {page === 'tools' && <Tools selected={route[1]} />}
        {page === 'upstreams' && <Upstreams who={who} selected={route.slice(1)} />}
        {page === 'sessions' && <Sessions admin={who.admin} />}
        {page === 'secrets' && <Secrets who={who} owner={route.slice(1)} />}
        {page === 'connect' && <Connect who={who} target={route.slice(1)} />}
        {page === 'policies' && <Policies who={who} />}
        {![
          'overview',
          'approvals',
          'calls',
          'tools',
          'upstreams',
          'sessions',
          'secrets',
          'connect',
          'policies',
        ].includes(page) && (
          <p>
            No such page. <a href={href('overview')}>Go to the overview</a>.
          </p>
        )}
      </main>
    </>
  );
}

/** The skip link must not change the hash route. */
function skipToMain(e: Event) {
  e.preventDefault();
  document.getElementById('main')?.focus();
}
