/**
 * Admins: the upstream MCP servers and their tools' pins (docs/upstreams.md, "Trust and
 * quarantine"): status, the poisoning scan's flags, a diff of the approved and the current
 * definition, and `Approve`, which names the hash shown so a definition that changed while the
 * admin read it is refused (409), not approved.
 */
import type {
  UpstreamApproval,
  UpstreamReport,
  UpstreamToolReport,
  WhoAmI,
} from '@toolgate/gateway';
import { useState } from 'preact/hooks';
import { ApiError, get, request } from '../api.js';
import { ErrorNote, Page, Status, usePoll } from '../components.js';
import { definitionDiff, visibleJson, visibleText } from '../format.js';
import { href } from '../router.js';

export function Upstreams({ who, selected }: { who: WhoAmI; selected: string[] }) {
  const [reload, setReload] = useState(0);
  const { data, error } = usePoll(
    (s) => (who.admin ? get<UpstreamReport[]>('/v1/upstreams', s) : Promise.resolve([])),
    5000,
    [who.admin, reload],
  );
  if (!who.admin)
    return (
      <Page title="Upstreams">
        <p role="alert">Upstreams are for admins only: sign in with an admin key.</p>
      </Page>
    );
  const [upstreamId, toolName] = selected;
  const chosen = data?.find((u) => u.id === upstreamId)?.tools.find((t) => t.tool === toolName);
  return (
    <Page title="Upstreams">
      <ErrorNote error={error} />
      {data && data.length === 0 && <p class="empty">No upstream is configured.</p>}
      {data?.map((u) => (
        <section key={u.id} aria-labelledby={`upstream-${u.id}`} class="upstream">
          <h2 id={`upstream-${u.id}`}>
            {u.id} <Status status={u.state} />{' '}
            <span class="tags">
              trust: {u.trust}
              {u.checkedAt ? ` · read ${new Date(u.checkedAt).toLocaleTimeString()}` : ''}
            </span>
          </h2>
          {u.tools.length === 0 ? (
            <p class="empty">No tools read yet.</p>
          ) : (
            <div class="table-wrap">
              <table>
                <caption class="sr-only">Tools of upstream {u.id}</caption>
                <thead>
                  <tr>
                    <th scope="col">Tool</th>
                    <th scope="col">Status</th>
                    <th scope="col">Flags</th>
                    <th scope="col">Approved by</th>
                  </tr>
                </thead>
                <tbody>
                  {u.tools.map((t) => (
                    <tr key={t.tool} data-tool={t.name}>
                      <td>
                        <a
                          href={href('upstreams', u.id, t.tool)}
                          aria-current={t === chosen ? 'page' : undefined}
                        >
                          {t.name}
                        </a>
                      </td>
                      <td>
                        <Status status={t.status} />
                        {t.leftOut ? ' · not served' : ''}
                      </td>
                      <td>
                        {t.flags.length === 0
                          ? ''
                          : [...new Set(t.flags.map((f) => f.code))].join(', ')}
                      </td>
                      <td>{t.status === 'approved' ? (t.approvedBy ?? '') : ''}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </section>
      ))}
      {chosen && (
        <ToolPin
          key={`${upstreamId}/${chosen.tool}/${chosen.hash}`}
          upstream={upstreamId!}
          tool={chosen}
          onApproved={() => setReload((n) => n + 1)}
        />
      )}
    </Page>
  );
}

function ToolPin({
  upstream,
  tool,
  onApproved,
}: {
  upstream: string;
  tool: UpstreamToolReport;
  onApproved: () => void;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const [done, setDone] = useState<UpstreamApproval | undefined>(undefined);

  const approve = async () => {
    setBusy(true);
    setError(undefined);
    try {
      const res = await request<UpstreamApproval>(
        `/v1/upstreams/${encodeURIComponent(upstream)}/tools/${encodeURIComponent(tool.tool)}/approve`,
        { json: { hash: tool.hash } },
      );
      setDone(res.body);
      onApproved();
    } catch (e) {
      setError(
        e instanceof ApiError && e.status === 409
          ? new Error(
              'The definition changed while you read it: read the new one before approving.',
            )
          : e,
      );
      if (e instanceof ApiError && e.status === 409) onApproved();
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="tool-pin" aria-labelledby="pin-title">
      <h2 id="pin-title">
        {tool.name} <Status status={tool.status} />
      </h2>
      {tool.leftOut && <p role="note">{visibleText(tool.leftOut)}</p>}
      <p class="tags">
        hash {tool.hash.slice(0, 16)}…
        {tool.approvedHash ? ` · approved ${tool.approvedHash.slice(0, 16)}…` : ''}
      </p>
      {tool.flags.length > 0 && (
        <ul class="flags" aria-label="Flags">
          {tool.flags.map((f, i) => (
            <li key={i}>
              <strong>{f.code}</strong> at <code>{visibleText(f.at)}</code>
              {f.key ? ' (property name)' : ''}: <code>{visibleText(f.match)}</code>
            </li>
          ))}
        </ul>
      )}
      {tool.approved !== undefined ? (
        <>
          <h3>Changes since the approved definition</h3>
          <Diff before={tool.approved} after={tool.current} />
        </>
      ) : (
        <>
          <h3>Definition</h3>
          <pre class="json" aria-label="Current definition" tabIndex={0}>
            {visibleJson(tool.current)}
          </pre>
        </>
      )}
      {tool.status !== 'approved' && !done && (
        <button type="button" disabled={busy} onClick={() => void approve()}>
          Approve this definition
        </button>
      )}
      {done && <p role="status">Approved by {done.approvedBy}.</p>}
      <ErrorNote error={error} />
    </section>
  );
}

/** Invisible characters are spelled out (`⟨U+FE0F⟩`): a change in them shows. */
function Diff({ before, after }: { before: unknown; after: unknown }) {
  const lines = definitionDiff(before, after);
  return (
    <pre class="json diff" aria-label="Definition diff" tabIndex={0}>
      {lines.map(([kind, text], i) => (
        <span key={i} class={kind === '+' ? 'diff-add' : kind === '-' ? 'diff-del' : undefined}>
          {`${kind} ${text}\n`}
        </span>
      ))}
    </pre>
  );
}
