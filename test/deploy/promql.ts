/**
 * Just enough PromQL reading to list the metric names an expression selects (for the contract
 * test between deploy/ and the services' /metrics), plus a reader of the Prometheus text format
 * that keeps metrics with no samples yet (HELP/TYPE lines only).
 */

/** Aggregations, functions and keywords never name a metric (functions are also caught by "("). */
const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'atan2',
  'inf',
  'nan',
]);

/** Series Prometheus makes itself: not exported by any service. */
export const PROMETHEUS_SERIES = new Set([
  'up',
  'scrape_duration_seconds',
  'scrape_samples_scraped',
  'scrape_samples_post_metric_relabeling',
  'scrape_series_added',
  'ALERTS',
  'ALERTS_FOR_STATE',
]);

/**
 * Metric names selected by a PromQL expression (Grafana's $variables allowed). Strings, label
 * matchers, ranges and grouping label lists are removed first; what remains that is an
 * identifier not followed by "(" and not a keyword is a metric name.
 */
export function metricNames(expr: string): Set<string> {
  if (/__name__/.test(expr)) {
    throw new Error(`selecting metrics by __name__ hides them from the contract test: ${expr}`);
  }
  let s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^{}]*\}/g, ' ')
    .replace(/\[[^[\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)/g, ' ')
    .replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?/g, ' ');
  // Numbers (0.95, 1e3, 0x1F) and durations (5m) must not yield identifiers.
  s = s.replace(
    /(?<![A-Za-z0-9_:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?)/g,
    ' ',
  );
  const names = new Set<string>();
  for (const m of s.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const name = m[0];
    const rest = s.slice(m.index + name.length);
    if (/^\s*\(/.test(rest)) continue; // function or aggregation call
    if (KEYWORDS.has(name.toLowerCase())) continue;
    names.add(name);
  }
  return names;
}

/** Metric names in a Grafana templating query: label_values(metric, label), query_result(expr), … */
export function templateQueryMetricNames(query: string): Set<string> {
  const labelValues =
    /^\s*label_values\(\s*(?:([^,()]+?)\s*,\s*)?[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$/.exec(query);
  if (labelValues) return labelValues[1] ? metricNames(labelValues[1]) : new Set();
  const wrapped = /^\s*(?:query_result|metrics)\((.*)\)\s*$/.exec(query);
  return metricNames(wrapped ? wrapped[1]! : query);
}

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

const SUFFIX = /^(.*)_(bucket|sum|count)$/;

/**
 * Families declared in a Prometheus text exposition: every `# TYPE` (and `# HELP`) line counts,
 * so a histogram nobody has observed yet is there; a sample line of an undeclared name adds it
 * as untyped (a histogram's _bucket/_sum/_count samples belong to their declared family).
 */
export function exposedFamilies(text: string): Map<string, MetricType> {
  const families = new Map<string, MetricType>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE ([A-Za-z_:][A-Za-z0-9_:]*) (\w+)/.exec(line);
    if (type) {
      families.set(type[1]!, type[2] as MetricType);
      continue;
    }
    const help = /^# HELP ([A-Za-z_:][A-Za-z0-9_:]*)/.exec(line);
    if (help) {
      if (!families.has(help[1]!)) families.set(help[1]!, 'untyped');
      continue;
    }
    const name = /^([A-Za-z_:][A-Za-z0-9_:]*)[\s{]/.exec(line)?.[1];
    if (name === undefined || families.has(name)) continue;
    const base = SUFFIX.exec(name)?.[1];
    const baseType = base === undefined ? undefined : families.get(base);
    if (baseType !== 'histogram' && baseType !== 'summary') families.set(name, 'untyped');
  }
  return families;
}

/**
 * Whether a series name a query selects exists in these families: a counter, gauge or summary
 * by its own name, a histogram only through its _bucket, _sum and _count series, a summary's
 * _sum and _count.
 */
export function isExposed(name: string, families: Map<string, MetricType>): boolean {
  const own = families.get(name);
  if (own !== undefined && own !== 'histogram') return true;
  const m = SUFFIX.exec(name);
  if (!m) return false;
  const type = families.get(m[1]!);
  return type === 'histogram' || (type === 'summary' && m[2] !== 'bucket');
}
