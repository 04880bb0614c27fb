/**
 * The tools this key may use; the chosen one's schema as a form whose `Run` goes through the
 * normal execute route (same policy, approval and limits as any client).
 */
import type { AcceptedAnswer, ExecuteAnswer, NativeTool } from '@toolgate/gateway';
import { useState } from 'preact/hooks';
import { get, request } from '../api.js';
import { ErrorNote, Json, Page, Status, usePoll } from '../components.js';
import { SchemaForm } from '../components/schema-form.js';
import { duration } from '../format.js';
import { href } from '../router.js';

type RunAnswer = ExecuteAnswer | AcceptedAnswer;

export function Tools({ selected }: { selected: string | undefined }) {
  const { data: tools, error } = usePoll((s) => get<NativeTool[]>('/tools', s), 0, []);
  const tool = tools?.find((t) => t.name === selected);
  return (
    <Page title="Tools">
      <ErrorNote error={error} />
      <div class="tools">
        <nav aria-label="Tools" class="tool-list">
          <ul>
            {tools?.map((t) => (
              <li key={t.name}>
                <a
                  href={href('tools', t.name)}
                  aria-current={t.name === selected ? 'page' : undefined}
                >
                  {t.name}
                </a>
                <span class="tags">
                  {t.category}
                  {t.sandboxed ? ' · sandboxed' : ''}
                  {t.requiresApproval ? ' · needs approval' : ''}
                </span>
              </li>
            ))}
          </ul>
        </nav>
        <div class="tool-detail">
          {tool ? (
            <ToolRunner key={tool.name} tool={tool} />
          ) : (
            <p class="empty">
              {tools && selected
                ? `No tool "${selected}" for this key.`
                : 'Choose a tool to run it.'}
            </p>
          )}
        </div>
      </div>
    </Page>
  );
}

function ToolRunner({ tool }: { tool: NativeTool }) {
  const [busy, setBusy] = useState(false);
  const [answer, setAnswer] = useState<RunAnswer | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);

  const run = async (args: Record<string, unknown>) => {
    setBusy(true);
    setError(undefined);
    setAnswer(undefined);
    try {
      const res = await request<RunAnswer>(`/tools/${encodeURIComponent(tool.name)}/execute`, {
        json: args,
      });
      setAnswer(res.body);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <h2>{tool.name}</h2>
      <p>{tool.description}</p>
      <p class="tags">
        risk {tool.risk} · timeout {duration(tool.timeoutMs)}
        {tool.requiresApproval ? ' · needs an admin’s approval' : ''}
      </p>
      <SchemaForm
        tool={tool.name}
        schema={tool.parameters}
        busy={busy}
        onRun={(args) => void run(args)}
      />
      <section aria-live="polite" aria-label="Answer" class="answer">
        {busy && <p>Running…</p>}
        <ErrorNote error={error} />
        {answer && (
          <>
            <p>
              <Status status={answer.status} />{' '}
              <a href={href('calls', answer.id)}>call {answer.id}</a>
              {'durationMs' in answer ? ` · ${duration(answer.durationMs)}` : ''}
              {'cached' in answer && answer.cached ? ' · cached' : ''}
            </p>
            {answer.status === 'pending_approval' && (
              <p>Waiting for an admin to approve it; follow it on the call’s page.</p>
            )}
            {'result' in answer && answer.result !== undefined && (
              <Json label="Result" value={answer.result} />
            )}
            {'error' in answer && answer.error && (
              <p class="error">
                <code>{answer.error.code}</code>: {answer.error.message}
              </p>
            )}
          </>
        )}
      </section>
    </>
  );
}
