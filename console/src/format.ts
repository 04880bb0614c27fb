import type { CallStatus } from '@toolgate/gateway';

export const FINAL: ReadonlySet<CallStatus> = new Set([
  'ok',
  'error',
  'cancelled',
  'rejected',
  'expired',
]);

export const STATUSES: CallStatus[] = [
  'queued',
  'running',
  'pending_approval',
  'ok',
  'error',
  'cancelled',
  'rejected',
  'expired',
];

/** "3 s", "4 min", "2 h": how long ago, or how long until, an ISO time. */
export function span(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export const ago = (iso: string, now = Date.now()) => `${span(now - Date.parse(iso))} ago`;

export function duration(ms: number | undefined): string {
  if (ms === undefined) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

export const time = (iso: string) => new Date(iso).toLocaleTimeString();

export const json = (v: unknown) => JSON.stringify(v, null, 2) ?? 'undefined';

/** Lines compared per side at most: past it the diff is every old line out, every new one in. */
const DIFF_MAX_LINES = 2000;

/**
 * A line diff of two texts (longest common subsequence): `' '` kept, `'-'` only in `a`, `'+'`
 * only in `b`. Quadratic, so bounded by DIFF_MAX_LINES (a definition is ≤ 64 KiB anyway).
 */
export function lineDiff(a: string, b: string): [' ' | '-' | '+', string][] {
  const x = a.split('\n');
  const y = b.split('\n');
  if (x.length > DIFF_MAX_LINES || y.length > DIFF_MAX_LINES)
    return [...x.map((l) => ['-', l] as ['-', string]), ...y.map((l) => ['+', l] as ['+', string])];
  const n = x.length;
  const m = y.length;
  // lcs[i][j]: the common subsequence's length of x[i..] and y[j..].
  const lcs = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      lcs[i]![j] =
        x[i] === y[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
  const out: [' ' | '-' | '+', string][] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push([' ', x[i]!]);
      i++;
      j++;
    } else if (lcs[i + 1]![j]! >= lcs[i]![j + 1]!) out.push(['-', x[i++]!]);
    else out.push(['+', y[j++]!]);
  }
  while (i < n) out.push(['-', x[i++]!]);
  while (j < m) out.push(['+', y[j++]!]);
  return out;
}

/**
 * Characters a reader cannot see or tell from a space: controls, format characters (bidi
 * overrides, zero-width ones, the tag block), every default-ignorable code point (variation
 * selectors U+FE00–FE0F and U+E0100–E01EF, Hangul fillers), line and paragraph separators,
 * spaces other than U+0020, private-use and unassigned code points. A line break is the
 * layout's own and is kept.
 */
const INVISIBLE =
  /(?![\n ])[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}\p{Zs}\p{Co}\p{Cn}]/gu;

/** `text` with every invisible character written as `⟨U+FE0F⟩`; a plain space stays. */
export function visibleText(text: string): string {
  return text.replace(
    INVISIBLE,
    (c) => `⟨U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}⟩`,
  );
}

/** A value as the console shows a definition: indented JSON, invisible characters spelled out. */
export const visibleJson = (v: unknown) => visibleText(json(v));

/**
 * The diff of two definitions an admin approves from: both as visibleJson, so a change made of
 * invisible characters is a line that differs where the reader can see it.
 */
export function definitionDiff(before: unknown, after: unknown): [' ' | '-' | '+', string][] {
  return lineDiff(visibleJson(before), visibleJson(after));
}
