/**
 * The contract between deploy/ and the services: every metric the Grafana dashboard and the
 * Prometheus alert rules query must be one that a real gateway and worker export. A renamed
 * metric fails here, not silently as an empty panel or an alert that can never fire.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startStack, type Stack } from '../support/stack.js';
import {
  PROMETHEUS_SERIES,
  exposedFamilies,
  isExposed,
  metricNames,
  templateQueryMetricNames,
  type MetricType,
} from './promql.js';

const ROOT = new URL('../../', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, ROOT), 'utf8');

interface Query {
  where: string;
  expr: string;
  template?: boolean;
}

interface Panel {
  title?: string;
  targets?: { expr?: string; datasource?: { uid?: string } }[];
  panels?: Panel[];
}

interface Dashboard {
  panels: Panel[];
  templating: {
    list: { name: string; type: string; query?: unknown; current?: { value?: unknown } }[];
  };
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

const dashboard = JSON.parse(read('deploy/grafana/dashboards/toolgate.json')) as Dashboard;
const alertGroups = (
  parseYaml(read('deploy/prometheus/alerts.yml')) as {
    groups: { name: string; rules: Rule[] }[];
  }
).groups;
const rules = alertGroups.flatMap((g) => g.rules);
const prometheus = parseYaml(read('deploy/prometheus/prometheus.yml')) as {
  rule_files: string[];
  scrape_configs: { job_name: string }[];
};

function dashboardQueries(): Query[] {
  const out: Query[] = [];
  const walk = (panels: Panel[]) => {
    for (const panel of panels) {
      for (const t of panel.targets ?? []) {
        if (t.expr) out.push({ where: `dashboard panel "${panel.title}"`, expr: t.expr });
      }
      walk(panel.panels ?? []);
    }
  };
  walk(dashboard.panels);
  for (const v of dashboard.templating.list) {
    if (v.type !== 'query') continue;
    const q = typeof v.query === 'string' ? v.query : (v.query as { query?: string }).query;
    if (q) out.push({ where: `dashboard variable $${v.name}`, expr: q, template: true });
  }
  return out;
}

const queries: Query[] = [
  ...dashboardQueries(),
  ...rules.map((r) => ({ where: `alert ${r.alert ?? r.record}`, expr: r.expr })),
];

describe('metrics contract: deploy/ queries only what the services export', () => {
  let stack: Stack;
  let families: Map<string, MetricType>;

  beforeAll(async () => {
    stack = await startStack();
    // One call so the call-path series have samples too (the check does not depend on it).
    await stack.call('/tools/calculator/execute', { json: { expression: '1+1' } });
    const workerPort = await stack.worker!.serveMetrics(0); // any free port
    expect(workerPort).toBeGreaterThan(0);
    const scrape = async (url: string) => {
      const res = await fetch(url);
      expect(res.status, url).toBe(200);
      return res.text();
    };
    const gatewayText = await scrape(stack.metricsUrl);
    const workerText = await scrape(`http://127.0.0.1:${workerPort}/metrics`);
    families = new Map([...exposedFamilies(workerText), ...exposedFamilies(gatewayText)]);
  });

  afterAll(async () => {
    await stack?.close();
  });

  it('every metric in the dashboard and the alert rules is exported by the gateway or the worker', () => {
    expect(queries.length).toBeGreaterThan(30);
    const used = new Set<string>();
    const missing: string[] = [];
    for (const q of queries) {
      const names = q.template ? templateQueryMetricNames(q.expr) : metricNames(q.expr);
      expect(names.size, `${q.where} selects no metric: ${q.expr}`).toBeGreaterThan(0);
      for (const name of names) {
        used.add(name);
        if (PROMETHEUS_SERIES.has(name) || isExposed(name, families)) continue;
        missing.push(`${q.where}: ${name}`);
      }
    }
    expect(missing, 'queried but not exported').toEqual([]);
    // The §7 metrics the operator pages are built on are all in use.
    for (const name of [
      'toolgate_calls_total',
      'toolgate_call_duration_seconds_bucket',
      'toolgate_queue_jobs',
      'toolgate_worker_in_flight',
      'toolgate_sandbox_warm_containers',
      'toolgate_sandbox_start_seconds_bucket',
      'toolgate_cache_lookups_total',
      'toolgate_limited_total',
      'toolgate_approvals_pending',
      'toolgate_workers_alive',
    ]) {
      expect(used, name).toContain(name);
    }
  });

  it('sandbox histograms with no observations still count as exported', () => {
    // Nothing ran in a sandbox here: only their HELP/TYPE lines are on the page.
    expect(families.get('toolgate_sandbox_start_seconds')).toBe('histogram');
    expect(isExposed('toolgate_sandbox_start_seconds_bucket', families)).toBe(true);
    expect(isExposed('toolgate_sandbox_start_seconds', families)).toBe(false);
    expect(isExposed('toolgate_no_such_metric_total', families)).toBe(false);
  });
});

describe('PromQL metric-name extraction', () => {
  it.each([
    [
      'sum by (tool) (rate(toolgate_calls_total{status="error",tool=~"$tool"}[$__rate_interval]))',
      ['toolgate_calls_total'],
    ],
    [
      'histogram_quantile(0.95, sum by (le, tool) (rate(toolgate_call_duration_seconds_bucket[5m]))) > 10',
      ['toolgate_call_duration_seconds_bucket'],
    ],
    [
      'sum(rate(a_total[5m])) by (x) / ignoring(y) group_left(z) b_total offset 1h',
      ['a_total', 'b_total'],
    ],
    ['up{job="toolgate-gateway"} == 0 or absent(up{job="toolgate-gateway"})', ['up']],
    [
      'max by (queue) (delta(toolgate_queue_jobs{state="failed"}[15m])) > 5e0',
      ['toolgate_queue_jobs'],
    ],
    ['x and on (image) sum by (image) (rate(y[10m:1m])) > 0', ['x', 'y']],
  ])('%s', (expr, names) => {
    expect([...metricNames(expr)].sort()).toEqual(names.sort());
  });

  it('Grafana variable queries', () => {
    expect([...templateQueryMetricNames('label_values(toolgate_calls_total, tool)')]).toEqual([
      'toolgate_calls_total',
    ]);
    expect(templateQueryMetricNames('label_values(tool)').size).toBe(0);
  });
});

describe('deploy/ configuration is consistent', () => {
  it('alert rules are actionable and refer to scrape jobs prometheus.yml defines', () => {
    expect(prometheus.rule_files).toContain('alerts.yml');
    const jobs = new Set(prometheus.scrape_configs.map((c) => c.job_name));
    expect(jobs).toContain('toolgate-gateway');
    expect(jobs).toContain('toolgate-worker');
    const names = new Set<string>();
    for (const rule of rules) {
      expect(rule.alert, `rule without a name: ${rule.expr}`).toBeTruthy();
      expect(names.has(rule.alert!), `duplicate alert ${rule.alert}`).toBe(false);
      names.add(rule.alert!);
      expect(['critical', 'warning', 'info'], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, `${rule.alert} summary`).toBeTruthy();
      expect(
        rule.annotations?.description?.length ?? 0,
        `${rule.alert} description`,
      ).toBeGreaterThan(60);
      for (const m of rule.expr.matchAll(/\bjob\s*=\s*"([^"]+)"/g)) {
        expect(jobs, `${rule.alert} uses job "${m[1]}"`).toContain(m[1]);
      }
    }
    // The ones the issue names: error rate, queue backlog, p95 latency, no live workers.
    for (const alert of [
      'ToolgateToolErrorRateHigh',
      'ToolgateQueueBacklog',
      'ToolgateCallLatencyHigh',
      'ToolgateNoLiveWorkers',
    ]) {
      expect(names).toContain(alert);
    }
  });

  it('every dashboard query goes to the provisioned Prometheus datasource', () => {
    const provisioned = parseYaml(
      read('deploy/grafana/provisioning/datasources/datasources.yaml'),
    ) as {
      datasources: { uid: string; type: string }[];
    };
    const uids = new Map(provisioned.datasources.map((d) => [d.uid, d.type]));
    expect(uids.get('prometheus')).toBe('prometheus');
    expect(uids.get('jaeger')).toBe('jaeger');
    const dsVar = dashboard.templating.list.find((v) => v.type === 'datasource');
    expect(dsVar?.current?.value).toBe('prometheus');
    const walk = (panels: Panel[]): string[] =>
      panels.flatMap((p) => [
        ...(p.targets ?? []).map((t) => t.datasource?.uid ?? ''),
        ...walk(p.panels ?? []),
      ]);
    const targets = walk(dashboard.panels);
    expect(targets.length).toBeGreaterThan(0);
    expect(new Set(targets)).toEqual(new Set(['${datasource}']));
  });
});
