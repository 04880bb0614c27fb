/**
 * The secret store (docs/credentials.md), admins only, as the API has it: a client's (or one
 * of its users') secret names and update times, Set and Delete. Values are write-only: the page
 * sends one and never sees one. Connect is the page a `credential_missing` elicitation links
 * to: one secret, named in the link, and a field for its value.
 */
import type { SecretList, SecretSaved, WhoAmI } from '@toolgate/gateway';
import { useState } from 'preact/hooks';
import { get, query, remove, request } from '../api.js';
import { ErrorNote, Page, usePoll } from '../components.js';
import { href } from '../router.js';
import { time } from '../format.js';

const ownerPath = (client: string, name?: string) =>
  `/v1/secrets/${encodeURIComponent(client)}${name === undefined ? '' : `/${encodeURIComponent(name)}`}`;

/** PUT the value; the field is cleared by the caller once it is saved. */
async function setSecret(client: string, name: string, value: string, user?: string) {
  return (
    await request<SecretSaved>(`${ownerPath(client, name)}${query({ user })}`, {
      method: 'PUT',
      json: { value },
    })
  ).body;
}

function AdminsOnly({ what }: { what: string }) {
  return (
    <p class="empty">
      Admins only: {what} is set with an admin key (or <code>toolgate secrets set</code>).
    </p>
  );
}

export function Secrets({ who, owner }: { who: WhoAmI; owner: string[] }) {
  const [client, user] = [owner[0] ?? '', owner[1] ?? ''];
  const [clientField, setClientField] = useState(client);
  const [userField, setUserField] = useState(user);
  const [tick, setTick] = useState(0);
  const [name, setName] = useState('');
  const [value, setValue] = useState('');
  const [actionError, setActionError] = useState<unknown>(undefined);
  const [busy, setBusy] = useState(false);
  const { data, error } = usePoll(
    (s) =>
      client === ''
        ? Promise.resolve(undefined)
        : get<SecretList>(`${ownerPath(client)}${query({ user: user || undefined })}`, s),
    10_000,
    [client, user, tick],
  );
  if (!who.admin)
    return (
      <Page title="Secrets">
        <AdminsOnly what="a secret" />
      </Page>
    );

  const act = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setActionError(undefined);
    try {
      await fn();
    } catch (e) {
      setActionError(e);
    } finally {
      setBusy(false);
      setTick((t) => t + 1);
    }
  };
  const owner_ = user === '' ? `client ${client}` : `user ${user} of client ${client}`;

  return (
    <Page title="Secrets">
      <form
        class="filters"
        aria-label="Whose secrets"
        onSubmit={(e) => {
          e.preventDefault();
          location.hash = href(
            'secrets',
            clientField.trim(),
            ...(userField.trim() ? [userField.trim()] : []),
          );
        }}
      >
        <label>
          Client
          <input
            value={clientField}
            required
            onInput={(e) => setClientField(e.currentTarget.value)}
          />
        </label>
        <label>
          User
          <input
            value={userField}
            placeholder="the client's own"
            onInput={(e) => setUserField(e.currentTarget.value)}
          />
        </label>
        <button type="submit">Show</button>
      </form>
      <ErrorNote error={error ?? actionError} />
      {client !== '' && data && (
        <>
          {data.secrets.length === 0 && <p class="empty">No secrets set for {owner_}.</p>}
          {data.secrets.length > 0 && (
            <div class="table-wrap">
              <table>
                <caption class="sr-only">Secrets of {owner_}: names and update times</caption>
                <thead>
                  <tr>
                    <th scope="col">Secret</th>
                    <th scope="col">Updated</th>
                    <th scope="col">
                      <span class="sr-only">Delete</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {data.secrets.map((s) => (
                    <tr key={s.name} data-secret={s.name}>
                      <td>{s.name}</td>
                      <td>{time(s.updatedAt)}</td>
                      <td>
                        <button
                          type="button"
                          class="secondary"
                          disabled={busy}
                          aria-label={`Delete secret ${s.name}`}
                          onClick={() =>
                            void act(() =>
                              remove(
                                `${ownerPath(client, s.name)}${query({ user: user || undefined })}`,
                              ),
                            )
                          }
                        >
                          Delete
                        </button>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <form
            class="filters"
            aria-label="Set a secret"
            onSubmit={(e) => {
              e.preventDefault();
              void act(async () => {
                await setSecret(client, name.trim(), value, user || undefined);
                setName('');
                setValue('');
              });
            }}
          >
            <label>
              Name
              <input value={name} required onInput={(e) => setName(e.currentTarget.value)} />
            </label>
            <label>
              Value
              <input
                type="password"
                autoComplete="off"
                spellcheck={false}
                required
                value={value}
                onInput={(e) => setValue(e.currentTarget.value)}
              />
            </label>
            <button type="submit" disabled={busy}>
              Set
            </button>
          </form>
        </>
      )}
    </Page>
  );
}

/** `#/connect/{client}/{secret}[/{user}]`: where a `credential_missing` elicitation points. */
export function Connect({ who, target }: { who: WhoAmI; target: string[] }) {
  const [client, secret, user] = target;
  const [value, setValue] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const [saved, setSaved] = useState<SecretSaved | undefined>(undefined);
  if (client === undefined || secret === undefined)
    return (
      <Page title="Connect">
        <p class="empty">This link names no secret.</p>
      </Page>
    );
  const owner = user === undefined ? `client ${client}` : `user ${user} of client ${client}`;
  if (!who.admin)
    return (
      <Page title={`Connect: ${secret}`}>
        <p>
          A tool of {owner} needs the secret <strong>{secret}</strong>.
        </p>
        <AdminsOnly what="it" />
      </Page>
    );

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      setSaved(await setSecret(client, secret, value, user));
      setValue('');
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <Page title={`Connect: ${secret}`}>
      <p>
        A tool of {owner} needs the secret <strong>{secret}</strong>. Its value is sealed in the
        secret store and added to that tool's requests by the worker; neither the model nor a
        sandbox ever sees it.
      </p>
      {saved ? (
        <p class="note" role="status">
          Saved at {time(saved.updatedAt)}. Go back to the assistant and try again.
        </p>
      ) : (
        <form onSubmit={submit} aria-label={`Set ${secret}`}>
          <label for="secret-value">Value of {secret}</label>
          <input
            id="secret-value"
            type="password"
            autoComplete="off"
            spellcheck={false}
            required
            value={value}
            onInput={(e) => setValue(e.currentTarget.value)}
          />
          <button type="submit" disabled={busy || value === ''}>
            Save
          </button>
        </form>
      )}
      <ErrorNote error={error} />
    </Page>
  );
}
