/**
 * The last hour from `/v1/series`, refreshed every 10 s: traffic, errors, latency, capacity;
 * each client's spend budget from `/v1/budget` (docs/budgets.md); for admins of a sharded
 * deployment, each Redis shard's state and clients from `/v1/shards` (docs/sharding.md).
 */
import type { BudgetReport, BudgetView, SeriesView, ShardList } from '@toolgate/gateway';
import { useMemo } from 'preact/hooks';
import { get } from '../api.js';
import { ErrorNote, Page, usePoll } from '../components.js';
import { Chart, type Line } from '../components/chart.js';

const last = (v: (number | null)[]) => {
  for (let i = v.length - 1; i >= 0; i--) if (v[i] !== null && v[i] !== undefined) return v[i];
  return null;
};
const show = (n: number | null | undefined, digits = 0) =>
  n === null || n === undefined ? '—' : n.toFixed(digits);

export function Overview() {
  const { data, error } = usePoll((s) => get<SeriesView>('/v1/series?minutes=60', s), 10_000, []);
  const charts = useMemo(() => (data ? build(data) : undefined), [data]);
  // The fleet's gauges are for admins; a client key gets empty series.
  const fleet = data !== undefined && data.workers.length > 0;
  return (
    <Page title="Overview">
      <ErrorNote error={error} />
      {!data && !error && <p>Loading…</p>}
      {data && charts && (
        <>
          <dl class="gauges" aria-label="Now">
            <div>
              <dt>Calls in the last hour</dt>
              <dd>{charts.totalCalls}</dd>
            </div>
            {fleet && (
              <>
                <div>
                  <dt>Queue depth</dt>
                  <dd>
                    {show(last(data.queue.fast))} fast · {show(last(data.queue.sandbox))} sandbox
                  </dd>
                </div>
                <div>
                  <dt>Workers alive</dt>
                  <dd>{show(last(data.workers))}</dd>
                </div>
                <div>
                  <dt>Warm pool</dt>
                  <dd>{show(last(data.warm))}</dd>
                </div>
              </>
            )}
          </dl>
          <div class="charts">
            <Chart
              title="Calls per second, by tool"
              unit="calls/s"
              x={charts.x}
              lines={charts.rate}
              summary={`${charts.totalCalls} calls in the last hour`}
            />
            <Chart
              title="Error rate, by tool"
              unit="%"
              x={charts.x}
              lines={charts.errors}
              summary={`${charts.totalErrors} errors in the last hour`}
            />
            <Chart
              title="p95 latency, by tool"
              unit="ms"
              x={charts.x}
              lines={charts.p95}
              summary="95th percentile duration per minute"
            />
            {fleet && (
              <>
                <Chart
                  title="Queue depth"
                  unit="jobs"
                  x={charts.x}
                  lines={[
                    { label: 'fast', values: data.queue.fast },
                    { label: 'sandbox', values: data.queue.sandbox },
                  ]}
                  summary={`now ${show(last(data.queue.fast))} fast, ${show(last(data.queue.sandbox))} sandbox`}
                />
                <Chart
                  title="Workers and warm pool"
                  unit="count"
                  x={charts.x}
                  lines={[
                    { label: 'workers alive', values: data.workers },
                    { label: 'warm sandboxes', values: data.warm },
                  ]}
                  summary={`now ${show(last(data.workers))} workers, ${show(last(data.warm))} warm`}
                />
              </>
            )}
          </div>
        </>
      )}
      {fleet && <Shards />}
      <Budgets />
    </Page>
  );
}

/** The Redis shards (admins; only when there is more than one): up or down, and whose data. */
function Shards() {
  const { data: list } = usePoll((s) => get<ShardList>('/v1/shards', s), 10_000, []);
  const data = list?.shards;
  if (!data || data.length < 2) return null;
  return (
    <section aria-label="Shards">
      <h2>Redis shards</h2>
      <table>
        <thead>
          <tr>
            <th>Shard</th>
            <th>State</th>
            <th>Clients</th>
          </tr>
        </thead>
        <tbody>
          {data.map((s) => (
            <tr key={s.id}>
              <td>
                {s.id}
                {s.home ? ' (home)' : ''}
              </td>
              <td class={s.state === 'down' ? 'error' : undefined}>{s.state}</td>
              <td>{s.clients.join(', ')}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/** Each client's budget use (admins: every client with one; a client: its own and its user's). */
function Budgets() {
  const { data } = usePoll((s) => get<BudgetReport>('/v1/budget', s), 30_000, []);
  if (!data) return null;
  const rows: { owner: string; budget: BudgetView }[] =
    'clients' in data
      ? data.clients.map((c) => ({ owner: c.client, budget: c.budget }))
      : [
          { owner: data.client, budget: data.budget },
          ...(data.user
            ? [{ owner: `${data.client} · ${data.user.id}`, budget: data.user.budget }]
            : []),
        ];
  const lines = rows.flatMap(({ owner, budget }) =>
    Object.entries(budget).flatMap(([metric, windows]) =>
      windows.map((w) => ({ owner, metric, ...w })),
    ),
  );
  if (lines.length === 0) return null;
  return (
    <section aria-label="Budgets">
      <h2>Budgets</h2>
      <table>
        <thead>
          <tr>
            <th>Client</th>
            <th>Metric</th>
            <th>Window</th>
            <th>Used</th>
            <th>Limit</th>
            <th>Share</th>
            <th>Resets</th>
          </tr>
        </thead>
        <tbody>
          {lines.map((l) => (
            <tr key={`${l.owner}/${l.metric}/${l.window}`}>
              <td>{l.owner}</td>
              <td>{l.metric}</td>
              <td>{l.window}</td>
              <td>{l.used}</td>
              <td>{l.limit}</td>
              <td>{l.limit > 0 ? `${Math.round((100 * l.used) / l.limit)} %` : '—'}</td>
              <td>{new Date(l.resetsAt).toISOString().replace('.000Z', 'Z')}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function build(s: SeriesView) {
  const from = Date.parse(s.from) / 1000;
  const x = Array.from({ length: s.points }, (_, i) => from + i * s.stepSeconds);
  const tools = Object.entries(s.tools);
  const rate: Line[] = tools.map(([tool, t]) => ({
    label: tool,
    values: t.calls.map((n) => n / s.stepSeconds),
  }));
  const errors: Line[] = tools.map(([tool, t]) => ({
    label: tool,
    values: t.calls.map((n, i) => (n > 0 ? (100 * (t.errors[i] ?? 0)) / n : null)),
  }));
  const p95: Line[] = tools.map(([tool, t]) => ({ label: tool, values: t.p95Ms }));
  const sum = (k: 'calls' | 'errors') =>
    tools.reduce((a, [, t]) => a + t[k].reduce((b, n) => b + n, 0), 0);
  return { x, rate, errors, p95, totalCalls: sum('calls'), totalErrors: sum('errors') };
}
