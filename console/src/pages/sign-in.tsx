import type { WhoAmI } from '@toolgate/gateway';
import { useState } from 'preact/hooks';
import { ApiError, request, session } from '../api.js';
import { ErrorNote } from '../components.js';

/** The key is checked against `/v1/me` before it is kept (in this tab only). */
export function SignIn(props: { onSignedIn: (who: WhoAmI) => void; initialError?: unknown }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<unknown>(props.initialError);
  const [busy, setBusy] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const who = (await request<WhoAmI>('/v1/me', { key: key.trim() })).body;
      session.signIn(key.trim());
      props.onSignedIn(who);
    } catch (err) {
      setError(
        err instanceof ApiError && err.status === 401
          ? new Error('That key was not accepted.')
          : err,
      );
    } finally {
      setBusy(false);
    }
  };

  return (
    <main id="main" class="sign-in">
      <h1>toolgate console</h1>
      <form onSubmit={submit}>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          spellcheck={false}
          required
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
        />
        <button type="submit" disabled={busy || key.trim() === ''}>
          Sign in
        </button>
        <p class="hint">
          The key stays in this browser tab and is sent only to this gateway. An admin key sees
          every client; a client key sees its own calls and tools.
        </p>
        <ErrorNote error={error} />
      </form>
    </main>
  );
}
